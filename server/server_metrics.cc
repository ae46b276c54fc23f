#include "server/server_metrics.h"

#include <chrono>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/checkpoint_metrics.h"
#include "server/checkpointer.h"
#include "server/job_table.h"
#include "server/shard_job.h"

namespace tessel {
namespace {

using metrics::Family;

struct Families {
  metrics::Registry& r = metrics::Default();
  Family& received = r.AddCounter("tessel_server_frames_received_total",
                                  "data-path frames received, by type", {"shard", "type"});
  Family& received_bytes = r.AddCounter("tessel_server_received_bytes_total",
                                        "data-path payload bytes received", {"shard"});
  Family& sent = r.AddCounter("tessel_server_frames_sent_total", "data-path frames sent, by type",
                              {"shard", "type"});
  Family& sent_bytes =
      r.AddCounter("tessel_server_sent_bytes_total", "data-path payload bytes sent", {"shard"});
  Family& refused = r.AddCounter("tessel_server_frames_refused_total",
                                 "data-path frames refused (answered with ERROR), by reason",
                                 {"shard", "reason"});
  Family& update_seconds =
      r.AddHistogram("tessel_server_update_seconds",
                     "time to reduce one bucket's gradients and run the optimizer on it",
                     {"job", "shard"}, metrics::ExponentialBuckets(10e-6, 2, 20));
  Family& updated_elements = r.AddCounter(
      "tessel_server_updated_elements_total",
      "parameters updated by the optimizer (rate() is its throughput)", {"job", "shard"});
  Family& queue_depth = r.AddGauge("tessel_server_update_queue_depth",
                                   "complete buckets waiting for the optimizer thread", {"shard"});
  Family& step =
      r.AddGauge("tessel_server_job_step", "updates applied (the job's version)", {"job", "shard"});
  Family& epoch =
      r.AddGauge("tessel_server_job_epoch", "the job's membership epoch", {"job", "shard"});
  Family& applied =
      r.AddCounter("tessel_server_job_applied_steps_total",
                   "steps completed (a replayed step counts again)", {"job", "shard"});
  Family& pushed = r.AddCounter("tessel_server_job_pushed_bytes_total",
                                "gradient bytes pushed to the job", {"job", "shard"});
  Family& pulled = r.AddCounter("tessel_server_job_pulled_bytes_total",
                                "parameter bytes served to the job's workers", {"job", "shard"});
  Family& job_refused = r.AddCounter("tessel_server_job_refused_frames_total",
                                     "the job's frames refused", {"job", "shard"});
  Family& stale = r.AddCounter("tessel_server_job_stale_epoch_frames_total",
                               "the job's frames refused for an old epoch", {"job", "shard"});
  Family& recoveries = r.AddCounter("tessel_server_job_recoveries_total",
                                    "times the job was replaced by a recovery", {"job", "shard"});
  Family& folded =
      r.AddCounter("tessel_server_job_folded_pushes_total",
                   "pushes summed in rank order before their bucket was complete (prefix order)",
                   {"job", "shard"});
  Family& memory = r.AddGauge("tessel_server_job_memory_bytes",
                              "parameters, optimizer state and gradient buffers held for the job",
                              {"job", "shard"});
};

Families& F() {
  static Families* f = new Families();
  return *f;
}

// Per job and shard: counters mirror the job's own (kept across recoveries).
void SetCounter(metrics::Counter* c, double v) {
  if (v > c->value()) c->Add(v - c->value());
}

}  // namespace

std::string RefusalReason(int code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
}

ServerMetrics::ServerMetrics(int shard) : shard_(absl::StrCat(shard)) {
  Families& f = F();
  received_ = {f.received.GetCounter({shard_, "push"}), f.received.GetCounter({shard_, "init"}),
               f.received.GetCounter({shard_, "pull"}), f.received.GetCounter({shard_, "other"})};
  received_bytes_ = f.received_bytes.GetCounter({shard_});
  sent_ = {f.sent.GetCounter({shard_, "params"}), f.sent.GetCounter({shard_, "error"})};
  sent_bytes_ = f.sent_bytes.GetCounter({shard_});
  // The routing refusals exist from the start, so a rate() or an alert on
  // them has a series at 0.
  for (const char* reason : {"malformed", "unknown_job", "size_mismatch", "bad_type"}) {
    f.refused.GetCounter({shard_, reason});
  }
}

void ServerMetrics::FrameReceived(FrameType type, uint64_t payload_bytes) {
  const int i = type == FrameType::kPush   ? 0
                : type == FrameType::kInit ? 1
                : type == FrameType::kPull ? 2
                                           : 3;
  received_[i]->Add();
  if (payload_bytes > 0) received_bytes_->Add(static_cast<double>(payload_bytes));
}

void ServerMetrics::FrameSent(FrameType type, uint64_t payload_bytes) {
  sent_[type == FrameType::kError ? 1 : 0]->Add();
  if (payload_bytes > 0) sent_bytes_->Add(static_cast<double>(payload_bytes));
}

void ServerMetrics::FrameRefused(absl::string_view reason) {
  F().refused.GetCounter({shard_, std::string(reason)})->Add();
}

void ServerMetrics::BucketUpdated(const std::string& job, int64_t elements, double seconds) {
  Families& f = F();
  f.update_seconds.GetHistogram({job, shard_})->Observe(seconds);
  f.updated_elements.GetCounter({job, shard_})->Add(static_cast<double>(elements));
}

metrics::Registry::CollectorHandle ServerMetrics::Watch(JobTable* jobs,
                                                        std::function<int64_t()> queue_depth,
                                                        Checkpointer* checkpointer) {
  return metrics::Default().AddCollector([this, jobs, queue_depth, checkpointer] {
    Families& f = F();
    CheckpointFamilies& c = CheckpointMetrics();
    f.queue_depth.GetGauge({shard_})->Set(static_cast<double>(queue_depth()));
    if (checkpointer != nullptr && checkpointer->enabled()) {
      c.queue.GetGauge({shard_})->Set(static_cast<double>(checkpointer->queued()));
    }
    std::set<std::string> live;
    const double now = UnixSeconds();
    for (const std::shared_ptr<ShardJob>& job : jobs->Jobs()) {
      const JobStats st = job->Stats(/*with_digest=*/false);
      const std::string& name = job->spec().job();
      const std::vector<std::string> l = {name, shard_};
      live.insert(name);
      f.step.GetGauge(l)->Set(static_cast<double>(st.step));
      f.epoch.GetGauge(l)->Set(static_cast<double>(st.epoch));
      const JobCounters& n = st.counters;
      SetCounter(f.applied.GetCounter(l), static_cast<double>(n.applied_steps));
      SetCounter(f.pushed.GetCounter(l), static_cast<double>(n.pushed_bytes));
      SetCounter(f.pulled.GetCounter(l), static_cast<double>(n.pulled_bytes));
      SetCounter(f.job_refused.GetCounter(l), static_cast<double>(n.rejected));
      SetCounter(f.stale.GetCounter(l), static_cast<double>(n.stale_epoch));
      SetCounter(f.recoveries.GetCounter(l), static_cast<double>(n.recoveries));
      SetCounter(f.folded.GetCounter(l), static_cast<double>(n.folded_pushes));
      f.memory.GetGauge(l)->Set(
          static_cast<double>(st.params_bytes + st.optimizer_bytes + st.grad_buffer_bytes));
      if (checkpointer != nullptr && checkpointer->enabled()) {
        c.failing_since.GetGauge(l)->Set(
            static_cast<double>(checkpointer->Progress(name).failing_since));
      }
      if (c.newest_time.Has({name})) {
        c.newest_age.GetGauge({name})->Set(now - c.newest_time.GetGauge({name})->value());
      }
    }
    auto gone = [&](const std::vector<std::string>& v) {
      return v.size() >= 2 && v[1] == shard_ && live.count(v[0]) == 0;
    };
    for (Family* family :
         {&f.step, &f.epoch, &f.applied, &f.pushed, &f.pulled, &f.job_refused, &f.stale,
          &f.recoveries, &f.folded, &f.memory, &f.update_seconds, &f.updated_elements,
          &c.write_seconds, &c.written_bytes, &c.writes, &c.failing_since}) {
      family->RemoveIf(gone);
    }
  });
}

}  // namespace tessel
