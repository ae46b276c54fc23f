#include "worker/internal/elastic_growth.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "runtime/log.h"

namespace tessel::internal {

std::vector<int> WorkerIdsOf(const v1::ShardStats& stats) {
  std::vector<int> ids(stats.worker_ids().begin(), stats.worker_ids().end());
  if (ids.empty()) {
    for (int r = 0; r < stats.world_size(); ++r) ids.push_back(r);
  }
  return ids;
}

ElasticGrowth::ElasticGrowth(JobContext* ctx, RegistryClient* registry, ShardFleet* fleet)
    : ctx_(ctx), registry_(registry), fleet_(fleet) {}

absl::StatusOr<std::optional<std::vector<int>>> ElasticGrowth::ClassifyJoin() {
  const WorkerOptions& o = ctx_->options;
  if (o.elastic_max_workers == 0) {
    TESSEL_RETURN_IF_ERROR(RefuseLateReplacement());
    return std::nullopt;
  }
  if (fleet_->size() == 0) return std::nullopt;
  // A rank beyond the world can only join a job that is running: wait for it.
  const absl::Time deadline = absl::Now() + o.connect_timeout;
  v1::JobRef ref;
  ref.set_job(o.job);
  for (bool logged = false;; logged = true) {
    v1::ShardStats st;
    absl::Status g = fleet_->Call(0, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats");
    if (g.ok()) {
      std::vector<int> ids = WorkerIdsOf(st);
      if (std::find(ids.begin(), ids.end(), ctx_->id) != ids.end()) return std::nullopt;
      if (static_cast<int>(ids.size()) >= o.elastic_max_workers) {
        return absl::FailedPreconditionError(absl::StrCat(
            ctx_->Where(), ": the running job already has ", ids.size(),
            " workers (registry ranks ", absl::StrJoin(ids, ", "),
            "), elastic_max_workers=", o.elastic_max_workers, ": no room for this one"));
      }
      newcomer_ = true;
      join_epoch_ = st.epoch();
      ctx_->world_size = static_cast<int>(ids.size());
      ctx_->rank = static_cast<int>(ids.size());  // prospective
      TESSEL_LOG(INFO) << ctx_->Where() << ": the job is running with " << ids.size()
                       << " worker(s) (registry ranks " << absl::StrJoin(ids, ", ") << ") at step "
                       << st.step() << "; joining it as a newcomer, admitted at the next "
                       << "checkpoint boundary (a multiple of " << o.checkpoint.every_steps
                       << " steps)";
      return ids;
    }
    if (!absl::IsNotFound(g)) return g;
    // Not created yet: ranks of the world start it; a rank beyond waits.
    if (ctx_->id < o.world_size) return std::nullopt;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(ctx_->Where(), ": rank ", ctx_->id, " is beyond the world of ", o.world_size,
                       " and joins a running job, but job '", o.job,
                       "' did not start on the shard servers within ",
                       absl::FormatDuration(o.connect_timeout), " (connect_timeout)"));
    }
    if (!logged) {
      TESSEL_LOG(INFO) << ctx_->Where() << ": rank " << ctx_->id << " is beyond the world of "
                       << o.world_size << ": waiting for the job to start, then joining it";
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status ElasticGrowth::RefuseLateReplacement() {
  if (!ctx_->resume || fleet_->size() == 0) return absl::OkStatus();
  v1::JobRef ref;
  ref.set_job(ctx_->options.job);
  v1::ShardStats st;
  if (fleet_->Call(0, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats").ok() &&
      st.worker_ids_size() > 0 &&
      std::find(st.worker_ids().begin(), st.worker_ids().end(), ctx_->id) ==
          st.worker_ids().end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx_->Where(), ": the job went on without this worker: an elastic recovery at epoch ",
        st.epoch(), " continued with ", st.worker_ids_size(), " worker(s), registry ranks ",
        absl::StrJoin(st.worker_ids(), ", "),
        ". A replacement cannot rejoin it; restart the whole job from a checkpoint with "
        "--resume and the world size you want"));
  }
  return absl::OkStatus();
}

std::vector<int> ElasticGrowth::Newcomers(const std::vector<int>& members) {
  std::vector<int> out;
  auto view = registry_->GetView(ctx_->options.job);
  if (!view.ok()) return out;
  for (const auto& m : view->members()) {
    if (m.role() == v1::ROLE_WORKER &&
        std::find(members.begin(), members.end(), m.rank()) == members.end()) {
      out.push_back(m.rank());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ElasticGrowth::Plan(std::vector<int> newcomers, int64_t step) {
  agreed_ = std::move(newcomers);
  step_ = step;
}

void ElasticGrowth::Clear() {
  agreed_.clear();
  step_ = -1;
}

std::vector<int> ElasticGrowth::Present(const v1::View& job) const {
  std::vector<int> present;
  for (int n : agreed_) {
    for (const auto& m : job.members()) {
      if (m.role() == v1::ROLE_WORKER && m.rank() == n) {
        present.push_back(n);
        break;
      }
    }
  }
  return present;
}

}  // namespace tessel::internal
