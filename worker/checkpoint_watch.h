// CheckpointWatch: what rank 0 of a job does about checkpoints between
// steps. Time-based checkpoints: with WorkerOptions::checkpoint_interval, it
// asks for one (at the next step boundary) once the interval has passed
// since it last did. Failure reports: when the job has checkpoints (every N
// steps, an initial one or time-based), every checkpoint_report_interval it
// reads the shards' checkpoint progress and logs when checkpoints start
// failing on some shard (WARNING, with the shards' errors and what a
// recovery would then roll back to) and when they succeed again (INFO).
// Training goes on either way.
//
// Threads: the thread that drives the Worker.
//
// Example (Worker::Step, rank 0, after the update):
//   watch.AfterStep(absl::Now(), ctx.Where(), [&] { return RequestCheckpoint(); },
//                   [&] { return control->Stats(absl::Seconds(2)); });
//   if (watch.failing_since() >= 0) { /* some shard's checkpoints fail */ }
#ifndef TESSEL_WORKER_CHECKPOINT_WATCH_H_
#define TESSEL_WORKER_CHECKPOINT_WATCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/shard.pb.h"
#include "worker/options.h"

namespace tessel {

class CheckpointWatch {
 public:
  // Asks the shards for a checkpoint at the next step boundary.
  using RequestFn = std::function<absl::Status()>;
  // Every shard's statistics (their checkpoint progress).
  using StatsFn = std::function<absl::StatusOr<std::vector<v1::ShardStats>>()>;

  // The intervals start at `now`.
  CheckpointWatch(const WorkerOptions& options, absl::Time now);

  // After a step at `now`: asks for a time-based checkpoint (`request`) if
  // one is due, then, if a report is due, reads `stats` and logs what
  // changed. `where` starts each log line. A failed request is logged; a
  // failed read of the stats is left to the step's own waits to report.
  void AfterStep(absl::Time now, absl::string_view where, const RequestFn& request,
                 const StatsFn& stats);

  // The first step whose checkpoint failed on some shard since one last
  // succeeded, as the shards said when last asked; -1 while they succeed or
  // before the first answer.
  int64_t failing_since() const { return failing_since_; }

 private:
  const absl::Duration interval_;
  const absl::Duration report_interval_;
  const bool checkpoints_;  // the job has checkpoints of some kind
  const std::string job_;
  absl::Time last_request_;
  absl::Time last_report_;
  int64_t failing_since_ = -1;
};

}  // namespace tessel

#endif  // TESSEL_WORKER_CHECKPOINT_WATCH_H_
