// The control plane's protocol limits, defined once: the gRPC message size
// every channel and server is built with (rpc/grpc_util.cc), and the
// ReadState/WriteState chunk that fits in it, which the shard server
// enforces and the workers chunk by.
//
// Contract: kMaxStateElementsPerCall elements of the masters plus
// kMaxStateSlots optimizer state slots (4 bytes each) take at most half of
// kGrpcMaxMessageBytes; the other half is headroom for the message framing
// and the per-tensor skip counts (ShardState.tensor_skips). A ReadState
// answer or WriteState chunk of that many elements always fits
// (server/shard_job_proto_test.cc checks it with a 3-slot optimizer).
//
// Example:
//   for (int64_t off = 0; off < n; off += kMaxStateElementsPerCall) {
//     req.set_count(std::min(kMaxStateElementsPerCall, n - off));
//   }
#ifndef TESSEL_RPC_LIMITS_H_
#define TESSEL_RPC_LIMITS_H_

#include <cstdint>

#include "core/optimizer.h"

namespace tessel {

// Largest gRPC message a Tessel channel or server receives.
inline constexpr int kGrpcMaxMessageBytes = 64 << 20;

// Elements per ReadState answer or WriteState chunk (2 Mi).
inline constexpr int64_t kMaxStateElementsPerCall = int64_t{1} << 21;

static_assert(kMaxStateElementsPerCall * 4 * (1 + kMaxStateSlots) <= kGrpcMaxMessageBytes / 2,
              "a state chunk must leave half the gRPC message limit for framing and skips");

}  // namespace tessel

#endif  // TESSEL_RPC_LIMITS_H_
