// The UCX transport's active-message ids, and the TSan hooks of its
// deliveries: one place for ucx_transport.cc and ucx_zero_copy.cc.
// descriptor_codec.h has the zero-copy messages' layout.
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_AM_IDS_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_AM_IDS_H_

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace tessel {
namespace ucx_internal {

inline constexpr unsigned kAmId = 7;
inline constexpr unsigned kProbeAmId = 8;       // CheckReceiveQueue's probes
inline constexpr unsigned kDescriptorAmId = 9;  // a payload in payload memory
inline constexpr unsigned kReleaseAmId = 10;    // the receiver is done with it
inline constexpr unsigned kHelloAmId = 11;      // a connecting peer's address (OnHello)

// UCX delivers a message after it was sent, but through memory TSan does not
// see (uninstrumented shared-memory queues), so tsan builds record the edge:
// every send releases, every delivery acquires. (Only visible when both ends
// live in one process, as in the conformance tests.)
#if defined(__SANITIZE_THREAD__)
inline char g_delivery_order;
inline void MessageSent() { __tsan_release(&g_delivery_order); }
inline void MessageDelivered() { __tsan_acquire(&g_delivery_order); }
#else
inline void MessageSent() {}
inline void MessageDelivered() {}
#endif

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_AM_IDS_H_
