#include "server/state_staging.h"

#include <algorithm>
#include <cstring>

namespace tessel {

bool StateStaging::Stage(int64_t step, int64_t offset, absl::string_view params,
                         absl::string_view state) {
  const int64_t count = static_cast<int64_t>(params.size() / sizeof(float));
  if (params.size() % sizeof(float) != 0 ||
      state.size() != params.size() * static_cast<size_t>(slots_) || offset < 0 ||
      offset > elements_ || count > elements_ - offset) {
    Drop();
    return false;
  }
  const size_t n = static_cast<size_t>(elements_);
  if (step_ != step) {
    Drop();
    staged_.assign(n * (1 + slots_), 0.f);
    seen_.assign(n, 0);
    step_ = step;
  }
  const size_t at = static_cast<size_t>(offset);
  std::memcpy(staged_.data() + at, params.data(), params.size());
  for (int k = 0; k < slots_; ++k) {
    std::memcpy(staged_.data() + n * (1 + k) + at,
                state.data() + static_cast<size_t>(k) * params.size(), params.size());
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!seen_[at + i]) {
      seen_[at + i] = 1;
      ++count_;
    }
  }
  return true;
}

void StateStaging::CopyTo(absl::Span<float> values, std::vector<std::vector<float>>& state) const {
  const int64_t n = elements_;
  std::copy(staged_.begin(), staged_.begin() + n, values.begin());
  for (int k = 0; k < slots_; ++k) {
    std::copy(staged_.begin() + n * (1 + k), staged_.begin() + n * (2 + k), state[k].begin());
  }
}

void StateStaging::Drop() {
  std::vector<float>().swap(staged_);
  std::vector<uint8_t>().swap(seen_);
  count_ = 0;
  step_ = -1;
}

}  // namespace tessel
