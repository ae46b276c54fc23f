#include "worker/internal/growth_policy.h"

#include <algorithm>

namespace tessel::internal {

int GrowthSlots(int max_workers, int world_size, int64_t every_steps, int64_t step) {
  const int room = max_workers - world_size;
  if (room <= 0 || every_steps <= 0 || step % every_steps != 0) return 0;
  return std::min(room, kMaxNewcomersPerBoundary);
}

std::vector<uint64_t> GrowthProposal(absl::Span<const int> seen, int slots) {
  std::vector<uint64_t> mine(static_cast<size_t>(std::max(slots, 0)), kNoNewcomer);
  for (size_t i = 0; i < seen.size() && i < mine.size(); ++i) {
    mine[i] = static_cast<uint64_t>(seen[i]);
  }
  return mine;
}

std::vector<int> AgreedNewcomers(absl::Span<const uint64_t> all, int world_size, int slots) {
  std::vector<int> agreed;
  const auto k = static_cast<std::ptrdiff_t>(slots);
  for (std::ptrdiff_t i = 0; i < k; ++i) {
    const uint64_t id = all[static_cast<size_t>(i)];  // rank 0's list
    if (id == kNoNewcomer) continue;
    bool everywhere = true;
    for (int r = 1; r < world_size && everywhere; ++r) {
      const auto begin = all.begin() + static_cast<std::ptrdiff_t>(r) * k;
      everywhere = std::find(begin, begin + k, id) != begin + k;
    }
    if (everywhere) agreed.push_back(static_cast<int>(id));
  }
  return agreed;
}

}  // namespace tessel::internal
