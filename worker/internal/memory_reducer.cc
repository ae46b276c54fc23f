#include "worker/internal/memory_reducer.h"

#include <algorithm>
#include <utility>

namespace tessel::internal {

void MemoryMean::Mean(int rank, absl::Span<float> data) {
  absl::MutexLock lock(&mu_);
  const int64_t round = round_;
  inputs_.resize(static_cast<size_t>(world_));
  inputs_[static_cast<size_t>(rank)].assign(data.begin(), data.end());
  if (++arrived_ == world_) {
    mean_.assign(data.size(), 0.f);
    for (size_t i = 0; i < data.size(); ++i) {
      float sum = 0.f;
      for (int r = 0; r < world_; ++r) sum += inputs_[static_cast<size_t>(r)][i];
      mean_[i] = sum / static_cast<float>(world_);
    }
    arrived_ = 0;
    ++round_;
  } else {
    std::pair<int64_t*, int64_t> wait(&round_, round);
    mu_.Await(absl::Condition(
        +[](std::pair<int64_t*, int64_t>* a) { return *a->first != a->second; }, &wait));
  }
  std::copy(mean_.begin(), mean_.end(), data.begin());
}

}  // namespace tessel::internal
