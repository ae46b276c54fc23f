// PayloadVector<T>: a std::vector whose storage comes from a transport's
// payload memory (transport.h), so sending a range of it skips the copies
// through the transport's queues where the path allows (UCX: a peer on this
// host reads it in place). Without payload memory (null, or an allocation
// it refuses) the storage is ordinary heap memory and everything works as
// with std::vector.
//
// Example:
//   PayloadVector<float> grads(PayloadAllocator<float>(transport->payload_memory()));
//   grads.assign(n, 0.f);
//   transport->Send(peer, header, grads.data() + begin, bytes, done);
#ifndef TESSEL_TRANSPORT_PAYLOAD_VECTOR_H_
#define TESSEL_TRANSPORT_PAYLOAD_VECTOR_H_

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace tessel {

template <typename T>
class PayloadAllocator {
 public:
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  PayloadAllocator() = default;
  explicit PayloadAllocator(std::shared_ptr<PayloadMemory> memory) : memory_(std::move(memory)) {}
  // Copies only (no moves): a vector moved from keeps allocating from the
  // same memory.
  PayloadAllocator(const PayloadAllocator& other) = default;
  PayloadAllocator& operator=(const PayloadAllocator& other) = default;
  template <typename U>
  PayloadAllocator(const PayloadAllocator<U>& other) : memory_(other.memory()) {}  // NOLINT

  T* allocate(size_t n) {
    if (memory_ != nullptr) {
      if (void* p = memory_->Allocate(n * sizeof(T))) return static_cast<T*>(p);
    }
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (memory_ != nullptr && memory_->Free(p)) return;
    std::allocator<T>().deallocate(p, n);
  }

  const std::shared_ptr<PayloadMemory>& memory() const { return memory_; }
  template <typename U>
  bool operator==(const PayloadAllocator<U>& other) const {
    return memory_ == other.memory();
  }
  template <typename U>
  bool operator!=(const PayloadAllocator<U>& other) const {
    return !(*this == other);
  }

 private:
  std::shared_ptr<PayloadMemory> memory_;
};

template <typename T>
using PayloadVector = std::vector<T, PayloadAllocator<T>>;

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_PAYLOAD_VECTOR_H_
