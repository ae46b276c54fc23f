#include "server/flight_recorder.h"

#include <algorithm>
#include <utility>

namespace tessel {

FlightRecorder::FlightRecorder(int world, int steps)
    : ring_(static_cast<size_t>(steps)),
      pushed_bytes_(static_cast<size_t>(world), 0),
      pulled_bytes_(static_cast<size_t>(world), 0) {
  const size_t w = static_cast<size_t>(world);
  for (StepArrivals& s : ring_) Allocate(&s, w);
  Allocate(&current_, w);
}

void FlightRecorder::Allocate(StepArrivals* s, size_t world) {
  s->first_push_us.assign(world, -1);
  s->last_push_us.assign(world, -1);
  s->pull_asked_us.assign(world, -1);
  s->pull_served_us.assign(world, -1);
}

void FlightRecorder::Clear(StepArrivals* s) {
  s->step = -1;
  s->end_us = -1;
  std::fill(s->first_push_us.begin(), s->first_push_us.end(), -1);
  std::fill(s->last_push_us.begin(), s->last_push_us.end(), -1);
  std::fill(s->pull_asked_us.begin(), s->pull_asked_us.end(), -1);
  std::fill(s->pull_served_us.begin(), s->pull_served_us.end(), -1);
}

StepArrivals* FlightRecorder::Find(int64_t step, bool in_progress) {
  if (in_progress) return &current_;
  if (step < 0) return nullptr;
  for (size_t i = count_; i > 0; --i) {  // newest first: usually the first
    StepArrivals& s = ring_[(head_ + i - 1) % ring_.size()];
    if (s.step == step) return &s;
    if (s.step < step) return nullptr;  // older ones are older steps
  }
  return nullptr;
}

void FlightRecorder::EndStep(int64_t step, int64_t now_us) {
  if (ring_.empty()) return;
  current_.step = step;
  current_.end_us = now_us;
  // The slot after the newest: the oldest once the ring is full.
  const size_t slot = (head_ + count_) % ring_.size();
  std::swap(ring_[slot], current_);  // vectors swap: no allocation
  if (count_ < ring_.size()) {
    ++count_;
  } else {
    head_ = (head_ + 1) % ring_.size();
  }
  Clear(&current_);
  any_ = false;
}

void FlightRecorder::Discard() {
  if (!any_) return;
  Clear(&current_);
  any_ = false;
}

std::vector<StepArrivals> FlightRecorder::Window() const {
  std::vector<StepArrivals> out;
  out.reserve(count_ + 1);
  for (size_t i = 0; i < count_; ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
  if (any_) out.push_back(current_);
  return out;
}

}  // namespace tessel
