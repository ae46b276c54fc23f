// Top-k gradient sparsification with error feedback: the one data-path mode
// that is NOT bitwise equal to single-process training (docs/compression.md).
//
// A worker pushes, per bucket of n gradient elements, only the k = TopkCount
// (ratio, n) entries of largest magnitude of (gradient + residual), and keeps
// what it did not send in its residual for the next step (error feedback:
// nothing is dropped, only delayed). The wire form of a bucket is
// SparseBytes(k) bytes: k uint32 indices into the bucket, strictly rising,
// then their k float32 values. Servers check that form (CheckSparse) and
// densify each rank's bucket (Densify) before the usual reduction in rank
// order, so the reduction and the optimizer are the dense path's.
//
// Example:
//   const int64_t k = TopkCount(0.01, n);
//   std::vector<uint8_t> wire(SparseBytes(k));
//   TopkCompress(grad, residual, n, k, wire.data());
//   ... server: CheckSparse(wire.data(), k, n); Densify(wire.data(), k, dense, n);
#ifndef TESSEL_CORE_TOPK_H_
#define TESSEL_CORE_TOPK_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"

namespace tessel {

// Entries pushed for a bucket of n elements: 0 when ratio <= 0 (off), else
// ceil(ratio * n) clamped to [1, n].
int64_t TopkCount(double ratio, int64_t n);
inline uint64_t SparseBytes(int64_t k) { return static_cast<uint64_t>(k) * 8; }

// The magnitude TopkCompress ranks by: the bits of |v|. For numbers they
// order as |v| does (both zeros are 0); NaN ranks above infinity.
inline uint32_t TopkKey(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7fffffffu;
}

// Writes the k entries of largest |grad[i] + residual[i]| (by TopkKey; ties:
// the lower index) into `wire`, indices rising, and leaves residual[i] =
// grad[i] + residual[i] for every entry not sent (0 for those sent).
// Deterministic; the devices' TopkCompress (gpu/device.h) gives the same
// bits.
void TopkCompress(const float* grad, float* residual, int64_t n, int64_t k, uint8_t* wire);

// InvalidArgument unless the k indices in `wire` rise strictly and stay
// below n (the values may be anything, as a dense gradient's may).
absl::Status CheckSparse(const uint8_t* wire, int64_t k, int64_t n);

// dense[0, n) = the sparse bucket (zeros elsewhere). `wire` must pass
// CheckSparse.
void Densify(const uint8_t* wire, int64_t k, float* dense, int64_t n);

}  // namespace tessel

#endif  // TESSEL_CORE_TOPK_H_
