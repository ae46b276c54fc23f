#include "server/checkpoint_metrics.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace tessel {

CheckpointFamilies& CheckpointMetrics() {
  static CheckpointFamilies* f = [] {
    metrics::Registry& r = metrics::Default();
    return new CheckpointFamilies{
        r.AddHistogram("tessel_checkpoint_write_seconds",
                       "time to write one shard's checkpoint file", {"job", "shard"},
                       metrics::ExponentialBuckets(1e-3, 2, 16)),
        r.AddCounter("tessel_checkpoint_written_bytes_total",
                     "checkpoint bytes written (parameters and optimizer state)", {"job", "shard"}),
        r.AddCounter("tessel_checkpoint_writes_total",
                     "shard checkpoint writes, by result (ok, error)", {"job", "shard", "result"}),
        r.AddGauge("tessel_checkpoint_queue_depth",
                   "snapshots waiting for (or being written by) the writer", {"shard"}),
        r.AddGauge("tessel_checkpoint_newest_step",
                   "step of the newest complete checkpoint this server finalized", {"job"}),
        r.AddGauge("tessel_checkpoint_newest_timestamp_seconds",
                   "when the newest complete checkpoint was finalized (Unix time)", {"job"}),
        r.AddGauge("tessel_checkpoint_newest_age_seconds",
                   "seconds since the newest complete checkpoint was finalized", {"job"}),
        r.AddGauge("tessel_checkpoint_failing_since_step",
                   "the first step whose checkpoint failed on this server since one last "
                   "succeeded; -1 while checkpoints succeed",
                   {"job", "shard"}),
    };
  }();
  return *f;
}

void CheckpointWritten(const std::string& job, int shard, double seconds, int64_t bytes, bool ok) {
  CheckpointFamilies& f = CheckpointMetrics();
  const std::string s = absl::StrCat(shard);
  f.writes.GetCounter({job, s, ok ? "ok" : "error"})->Add();
  if (!ok) return;
  f.write_seconds.GetHistogram({job, s})->Observe(seconds);
  f.written_bytes.GetCounter({job, s})->Add(static_cast<double>(bytes));
}

void CheckpointFinalized(const std::string& job, int64_t step) {
  CheckpointFamilies& f = CheckpointMetrics();
  f.newest_step.GetGauge({job})->Set(static_cast<double>(step));
  f.newest_time.GetGauge({job})->Set(UnixSeconds());
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace tessel
