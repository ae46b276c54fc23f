#include "core/early_stopping.h"

#include <cmath>

namespace tessel {

bool EarlyStopping::Observe(double value) {
  ++observed_;
  bool improved = false;
  if (!std::isnan(value)) {
    if (!best_) {
      improved = true;
    } else if (policy_.mode == EarlyStoppingPolicy::Mode::kMin) {
      improved = value < *best_ - policy_.min_delta;
    } else {
      improved = value > *best_ + policy_.min_delta;
    }
  }
  if (improved) {
    best_ = value;
    since_improvement_ = 0;
  } else {
    ++since_improvement_;
  }
  if (since_improvement_ >= (policy_.patience < 1 ? 1 : policy_.patience)) stop_ = true;
  return improved;
}

}  // namespace tessel
