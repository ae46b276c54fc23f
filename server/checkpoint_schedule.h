// CheckpointSchedule: at which step boundaries a shard job snapshots its
// state for the Checkpointer: every `every_steps` steps (JobSpec.checkpoint;
// 0 = never), and at the steps SaveCheckpoint asked for.
//
// Contract: Request(step) adds a step (again: no change); Cancel(step)
// withdraws it; DueAt(version) is true when the shard reaching `version`
// must snapshot (a multiple of every_steps, or requested), and consumes the
// request. Pure bookkeeping; the job decides whether a request for the
// version it stands at is answered at once.
//
// Threads: none and no lock: the owner (ShardJob) serializes every call.
//
// Example:
//   CheckpointSchedule schedule(/*every_steps=*/100);
//   schedule.Request(42);
//   if (schedule.DueAt(version)) checkpointer.Submit(snapshot);
#ifndef TESSEL_SERVER_CHECKPOINT_SCHEDULE_H_
#define TESSEL_SERVER_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <set>

namespace tessel {

class CheckpointSchedule {
 public:
  explicit CheckpointSchedule(int64_t every_steps) : every_(every_steps) {}

  void Request(int64_t step) { requested_.insert(step); }
  void Cancel(int64_t step) { requested_.erase(step); }
  // Whether DueAt(version) would be true, without consuming a request.
  bool WouldBeDueAt(int64_t version) const {
    return requested_.count(version) > 0 || (every_ > 0 && version % every_ == 0);
  }
  bool DueAt(int64_t version) {
    const bool requested = requested_.erase(version) > 0;
    return requested || (every_ > 0 && version % every_ == 0);
  }

 private:
  const int64_t every_;
  std::set<int64_t> requested_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_CHECKPOINT_SCHEDULE_H_
