// FlightRecorder: one shard's record of when each rank's pushes arrived,
// for the last kSteps steps of a job (a ring), so a slow or stuck rank can
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
//   Window()          the ring, oldest first, then the step in progress
//                     (end_us -1, step -1: its number is not known before it
//                     ends) if any rank pushed in it.
// No allocation after construction on Pushed, EndStep and Discard (the data
// path): every record is allocated up front and records are swapped.
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
  std::vector<StepArrivals> Window() const;

 private:
  static void Clear(StepArrivals* s);

  std::vector<StepArrivals> ring_;  // ring_[(head_ + i) % size] oldest first
  size_t head_ = 0;
  size_t count_ = 0;
  StepArrivals current_;
  bool any_ = false;  // some rank pushed in the current step
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FLIGHT_RECORDER_H_
