#include "gpu/internal/pinned_regions.h"

#include <algorithm>
#include <cstddef>

namespace tessel::gpu::internal {

PageRange PinnedRegions::WholePages(const void* p, size_t bytes, size_t page) {
  if (p == nullptr || bytes == 0) return {};
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end <= begin) return {};
  return {reinterpret_cast<void*>(begin), end - begin};
}

void PinnedRegions::Add(const void* p, PageRange pages) {
  absl::MutexLock lock(&mu_);
  regions_.push_back({p, pages});
}

void* PinnedRegions::Remove(const void* p) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].p == p) {
      void* base = regions_[i].pages.base;
      regions_.erase(regions_.begin() + static_cast<std::ptrdiff_t>(i));
      return base;
    }
  }
  return nullptr;
}

void PinnedRegions::ForEachPiece(
    const void* host, size_t bytes,
    const std::function<bool(size_t offset, size_t bytes)>& copy) const {
  if (bytes == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(host);
  const uintptr_t end = begin + bytes;
  std::vector<std::pair<uintptr_t, uintptr_t>> pinned;  // overlapping regions, clipped
  {
    absl::MutexLock lock(&mu_);
    for (const Region& r : regions_) {
      const uintptr_t rb = reinterpret_cast<uintptr_t>(r.pages.base);
      const uintptr_t re = rb + r.pages.bytes;
      if (rb < end && begin < re) pinned.push_back({std::max(rb, begin), std::min(re, end)});
    }
  }
  std::sort(pinned.begin(), pinned.end());
  uintptr_t at = begin;
  for (const auto& [pb, pe] : pinned) {
    if (at < pb && !copy(at - begin, pb - at)) return;  // pageable gap
    if (!copy(pb - begin, pe - pb)) return;             // pinned
    at = pe;
  }
  if (at < end) copy(at - begin, end - at);  // pageable tail
}

}  // namespace tessel::gpu::internal
