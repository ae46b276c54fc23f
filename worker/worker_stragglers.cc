// Worker's view of the stragglers the shard servers name (worker.h): the
// list the registry's heartbeat answer carries, and --straggler_policy=evict's
// decision to leave.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/worker_parts.h"
#include "worker/worker.h"

namespace tessel {

bool Worker::straggler_evicted() {
  const internal::JobContext& ctx = p_->ctx;
  const WorkerOptions& o = ctx.options;
  if (o.straggler_policy != WorkerOptions::StragglerPolicy::kEvict || p_->membership == nullptr) {
    return false;
  }
  if (p_->evicted) return true;
  v1::Straggler me;
  const absl::Time since = p_->membership->SlowestSince(&me);
  const absl::Time now = absl::Now();
  if (since == absl::InfiniteFuture() || now - since < o.straggler_evict_after) return false;
  const std::string named = absl::StrFormat(
      "the shard servers have named this rank (%d) the job's slowest straggler for %s (score "
      "%.2f, its last push %.3f s after the first rank's; shard %d)",
      ctx.rank.load(), absl::FormatDuration(absl::Trunc(now - since, absl::Milliseconds(100))),
      me.score(), me.lateness_seconds(), me.shard());
  if (ctx.world_size - 1 < o.elastic_min_workers) {
    if (!p_->evict_refused_said) {
      p_->evict_refused_said = true;
      TESSEL_LOG(WARNING) << ctx.Where() << ": " << named
                          << "; --straggler_policy=evict leaves it in: the job would have "
                          << ctx.world_size - 1 << " worker(s), fewer than elastic_min_workers "
                          << o.elastic_min_workers;
    }
    return false;
  }
  p_->evicted = true;
  TESSEL_LOG(WARNING) << ctx.Where() << ": " << named
                      << "; --straggler_policy=evict: it leaves the job at a checkpoint and the "
                      << "others go on without it (" << ctx.world_size - 1 << " workers)";
  if (p_->metrics != nullptr) p_->metrics->Evicted();
  return true;
}

std::vector<StragglerReport> Worker::stragglers() const {
  std::vector<StragglerReport> out;
  if (p_->membership == nullptr) return out;
  for (const v1::Straggler& s : p_->membership->stragglers()) {
    StragglerReport r;
    r.rank = s.rank();
    r.registry_rank = s.registry_rank();
    r.score = s.score();
    r.lateness_seconds = s.lateness_seconds();
    r.shard = s.shard();
    r.since_unix_ms = s.since_unix_ms();
    r.host = s.host();
    r.pid = s.pid();
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tessel
