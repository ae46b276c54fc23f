// The bookkeeping of page-locked host memory (Device::PinHost): which whole
// pages of a caller's range get registered, and how a host range of a copy
// is cut into pieces that are each wholly pinned or wholly pageable.
//
// Why: two small host buffers may share a page (heap neighbours: a worker's
// params and grads), and registering a page twice fails, so only the whole
// pages inside [p, p + bytes) are registered and the edge pages stay
// pageable. A single cudaMemcpyAsync may not span pinned and pageable memory
// (the driver answers "invalid argument", seen on an H100), so the CUDA
// device splits each host copy at the registered regions' edges.
//
// Pure logic: the caller registers and unregisters the pages
// (cudaHostRegister) and issues the copies.
//
// Thread safety: all methods may be called from any thread (mu_).
//
// Example:
//   PinnedRegions regions;
//   PageRange r = PinnedRegions::WholePages(p, bytes, 4096);
//   if (!r.empty() && cudaHostRegister(r.base, r.bytes, 0) == cudaSuccess) regions.Add(p, r);
//   regions.ForEachPiece(host, n, [&](size_t at, size_t len) { return Copy(at, len); });
//   void* base = regions.Remove(p);  // then cudaHostUnregister(base) if not null
#ifndef TESSEL_GPU_INTERNAL_PINNED_REGIONS_H_
#define TESSEL_GPU_INTERNAL_PINNED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tessel::gpu::internal {

// Whole pages [base, base + bytes).
struct PageRange {
  void* base = nullptr;
  size_t bytes = 0;
  bool empty() const { return bytes == 0; }
};

class PinnedRegions {
 public:
  // The whole pages of `page` bytes inside [p, p + bytes); empty when there
  // is none (a range smaller than a page, or p null).
  static PageRange WholePages(const void* p, size_t bytes, size_t page);

  // Remembers that `pages` were registered for the caller's pointer p.
  void Add(const void* p, PageRange pages);
  // Forgets p's registration and returns its base for unregistering; null
  // when p has none (never pinned, or less than a page).
  void* Remove(const void* p);

  // Calls copy(offset, bytes) for consecutive pieces of [host, host + bytes),
  // each wholly inside one registered region or wholly outside all of them,
  // in ascending order, until a copy returns false. At most three pieces
  // (pageable head, pinned middle, pageable tail) for a range inside one
  // region; a range over several regions gets more. Nothing for 0 bytes.
  void ForEachPiece(const void* host, size_t bytes,
                    const std::function<bool(size_t offset, size_t bytes)>& copy) const;

 private:
  struct Region {
    const void* p;  // the caller's pointer
    PageRange pages;
  };
  mutable absl::Mutex mu_;
  std::vector<Region> regions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_PINNED_REGIONS_H_
