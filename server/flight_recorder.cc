#include "server/flight_recorder.h"

#include <algorithm>
#include <utility>

namespace tessel {

FlightRecorder::FlightRecorder(int world, int steps) : ring_(static_cast<size_t>(steps)) {
  const size_t w = static_cast<size_t>(world);
  for (StepArrivals& s : ring_) {
    s.first_push_us.assign(w, -1);
    s.last_push_us.assign(w, -1);
  }
  current_.first_push_us.assign(w, -1);
  current_.last_push_us.assign(w, -1);
}

void FlightRecorder::Clear(StepArrivals* s) {
  s->step = -1;
  s->end_us = -1;
  std::fill(s->first_push_us.begin(), s->first_push_us.end(), -1);
  std::fill(s->last_push_us.begin(), s->last_push_us.end(), -1);
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
