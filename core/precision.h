// Half-precision conversions for mixed-precision training: fp16 (IEEE 754
// binary16) and bf16 (bfloat16) on the wire and on the worker, fp32 master
// parameters and optimizer state on the shard servers.
//
// Conversions to half round to nearest, ties to even, like CUDA's
// __float2half_rn / __float2bfloat16_rn and numpy's astype; NaN stays NaN
// (quiet), overflow becomes infinity. Conversions to float are exact.
// Vectorised (F16C on x86 where available); every path gives the same bits.
//
// Example:
//   std::vector<uint16_t> h(n);
//   FloatToHalf(HalfType::kF16, f.data(), h.data(), n);
#ifndef TESSEL_CORE_PRECISION_H_
#define TESSEL_CORE_PRECISION_H_

#include <cstddef>
#include <cstdint>

namespace tessel {

enum class HalfType { kF16, kBF16 };

void FloatToHalf(HalfType t, const float* in, uint16_t* out, size_t n);
void HalfToFloat(HalfType t, const uint16_t* in, float* out, size_t n);

// acc[i] = acc[i] + src[i] in the half type `t`: both widened to float
// (exactly), added once in float, rounded to half (nearest, ties to even).
// The float sum rounded to half is the correctly rounded half sum (float
// has more than twice the half types' precision plus two bits), so this is
// what torch's in-place add of one half tensor into another gives, on the
// CPU and on CUDA: how a rank accumulates half gradients over micro-batches.
// `src` and `acc` may not overlap. No allocation.
void AddHalfInto(HalfType t, const uint16_t* src, uint16_t* acc, size_t n);

// Scalar forms (the definition the vector paths must match).
uint16_t FloatToF16(float f);
float F16ToFloat(uint16_t h);
uint16_t FloatToBF16(float f);
float BF16ToFloat(uint16_t h);

}  // namespace tessel

#endif  // TESSEL_CORE_PRECISION_H_
