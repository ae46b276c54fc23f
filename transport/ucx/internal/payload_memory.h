// UcxPayloadMemory: the UCX transport's PayloadMemory (transport.h). Each
// allocation is its own region, ucp_mem_map(ALLOCATE)'d (on one host a
// shared-memory segment) and registered for peers: its packed remote key
// (ucp_rkey_pack) goes into every descriptor of a payload inside it, so a
// peer on this host can map it (ucp_rkey_ptr) and read the payload in place.
// Find tells the sender whether a payload lies in one region.
//
// Allocate refuses (nullptr; callers fall back to ordinary memory) a size
// that /dev/shm has no room for: UCX may back the region with a sparse file
// there, and touching pages past the filesystem's free space raises SIGBUS
// (a container's /dev/shm is often 64 MiB).
//
// Threads: every method from any thread (one mutex over the region table).
// Shares the UcxContext: memory may outlive the transport; the context is
// cleaned up after the last region is unmapped.
//
// Example:
//   auto memory = std::make_shared<UcxPayloadMemory>(context);
//   float* grads = static_cast<float*>(memory->Allocate(n * sizeof(float)));
//   std::optional<UcxPayloadMemory::Found> at = memory->Find(grads + 10, 40);
//   memory->Free(grads);
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_PAYLOAD_MEMORY_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_PAYLOAD_MEMORY_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "transport/transport.h"
#include "transport/ucx/internal/context.h"

namespace tessel {
namespace ucx_internal {

class UcxPayloadMemory : public PayloadMemory {
 public:
  // The region a payload lies in.
  struct Found {
    uint64_t id;                              // unique among this memory's regions, never reused
    uintptr_t base;                           // the region's address here
    size_t bytes;                             // the region's size
    std::shared_ptr<const std::string> rkey;  // packed
  };

  explicit UcxPayloadMemory(std::shared_ptr<UcxContext> context) : context_(std::move(context)) {}
  ~UcxPayloadMemory() override;  // unmaps what was not freed

  // `bytes` of zeroed, registered memory, or nullptr (0 bytes, no room in
  // /dev/shm, or UCX refused).
  void* Allocate(size_t bytes) override;
  bool Free(void* p) override;
  // The region holding [p, p + bytes), if one does.
  std::optional<Found> Find(const void* p, size_t bytes);

 private:
  struct Region {
    size_t bytes = 0;
    ucp_mem_h memh = nullptr;
    uint64_t id = 0;
    std::shared_ptr<const std::string> rkey;  // packed
  };

  const std::shared_ptr<UcxContext> context_;
  absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // by base address
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_PAYLOAD_MEMORY_H_
