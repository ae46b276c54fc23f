// FlightRecorder: one shard's record of when each rank's pushes arrived and
// when its pulls were asked for and served, for the last kSteps steps of a
// job (a ring), and each rank's gradient and parameter bytes over the job's
// life on this shard, so a slow or stuck rank can
// be named (core/straggler.h) and a stalled step explained
// (server/straggler_watcher.h writes the window as a timeline).
//
// Contract:
//   Pushed(r, t)      a push header of rank r arrived at t (microseconds of
//                     the system clock): the first of the step and the last
//                     so far are kept.
//   EndStep(s, t)     step s (the pushes' step) ended at t: the record moves
//                     into the ring (the oldest drops out when it is full)
//                     and a new step starts empty.
//   Discard()         the step in progress is abandoned (a restore, a step
//                     whose pushes all failed): its record is emptied.
//   PullAsked(r, s, in_progress, t)
//                     a PULL of rank r for step s's result (version s + 1)
//                     arrived at t: in_progress says s is the step in
//                     progress, else s is looked up in the ring (newest
//                     first; a step no longer there is not recorded). The
//                     first ask of the step is kept.
//   PullServed(r, s, in_progress, t)
//                     a PARAMS bucket of step s's result went to rank r at
//                     t: the last is kept (when the pull was served in full).
//   CountBytes(r, pushed, pulled)
//                     rank r's gradient payload landed / parameters sent.
//   Window()          the ring, oldest first, then the step in progress
//                     (end_us -1, step -1: its number is not known before it
//                     ends) if any rank pushed in it.
// No allocation after construction on any call but Window and the byte
// reads (the data path): every record is allocated up front and records are
// swapped.
//
// Threads: none and no lock; the owner serializes every call (PushTracker,
// under ShardJob's mutex).
//
// Example:
//   FlightRecorder rec(/*world=*/4);
//   rec.Pushed(2, Timeline::NowUs());
//   rec.EndStep(/*step=*/41, Timeline::NowUs());
//   std::vector<StepArrivals> w = rec.Window();
#ifndef TESSEL_SERVER_FLIGHT_RECORDER_H_
#define TESSEL_SERVER_FLIGHT_RECORDER_H_

#include <cstdint>
#include <vector>

#include "core/straggler.h"

namespace tessel {

class FlightRecorder {
 public:
  // Steps kept: enough for the straggler window (core/straggler.h) and a
  // stall dump that shows the run-up to the stall.
  static constexpr int kSteps = 32;

  explicit FlightRecorder(int world, int steps = kSteps);

  void Pushed(int rank, int64_t now_us) {
    int64_t& first = current_.first_push_us[static_cast<size_t>(rank)];
    if (first < 0) first = now_us;
    current_.last_push_us[static_cast<size_t>(rank)] = now_us;
    any_ = true;
  }
  void EndStep(int64_t step, int64_t now_us);
  void Discard();
  void PullAsked(int rank, int64_t step, bool in_progress, int64_t now_us) {
    if (StepArrivals* s = Find(step, in_progress)) {
      int64_t& asked = s->pull_asked_us[static_cast<size_t>(rank)];
      if (asked < 0) asked = now_us;
      if (in_progress) any_ = true;
    }
  }
  void PullServed(int rank, int64_t step, bool in_progress, int64_t now_us) {
    if (StepArrivals* s = Find(step, in_progress)) {
      s->pull_served_us[static_cast<size_t>(rank)] = now_us;
      if (in_progress) any_ = true;
    }
  }
  void CountBytes(int rank, int64_t pushed, int64_t pulled) {
    pushed_bytes_[static_cast<size_t>(rank)] += pushed;
    pulled_bytes_[static_cast<size_t>(rank)] += pulled;
  }
  std::vector<StepArrivals> Window() const;
  // Per rank (slot): gradient payload bytes that landed, parameter bytes
  // sent, over the job's life on this shard.
  const std::vector<int64_t>& pushed_bytes() const { return pushed_bytes_; }
  const std::vector<int64_t>& pulled_bytes() const { return pulled_bytes_; }

 private:
  static void Clear(StepArrivals* s);
  static void Allocate(StepArrivals* s, size_t world);
  // The record of `step`: the step in progress, or the ring's (nullptr if
  // it is no longer there or was never recorded).
  StepArrivals* Find(int64_t step, bool in_progress);

  std::vector<StepArrivals> ring_;  // ring_[(head_ + i) % size] oldest first
  size_t head_ = 0;
  size_t count_ = 0;
  StepArrivals current_;
  bool any_ = false;  // some rank pushed or pulled in the current step
  std::vector<int64_t> pushed_bytes_;
  std::vector<int64_t> pulled_bytes_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FLIGHT_RECORDER_H_
