// The fp32 <-> fp16/bf16 conversions on bit patterns, round to nearest even:
// the one definition core/precision.cc (the CPU) and gpu/kernels.cu (CUDA,
// through nvcc) both compile, so the wire casts give the same bits on either.
// Plain integer arithmetic, no dependencies: nvcc builds it as __host__
// __device__ functions.
//
//   - fp16: NaN stays a quiet NaN, its payload truncated (as F16C does);
//     values that round past 65504 become inf; subnormal halves are rounded
//     like normal ones.
//   - bf16: NaN is made quiet (0x40 set); everything else rounds to nearest
//     even, overflowing to inf.
//   - Widening is exact (a signalling fp16 NaN comes back quiet).
//
// Example:
//   uint32_t bits;
//   std::memcpy(&bits, &x, 4);
//   uint16_t h = half_bits::F32ToBF16(bits);   // what goes on the wire
//   uint32_t back = half_bits::BF16ToF32(h);    // exact widening
#ifndef TESSEL_CORE_HALF_BITS_H_
#define TESSEL_CORE_HALF_BITS_H_

#include <cstdint>

#if defined(__CUDACC__)
#define TESSEL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSEL_HOST_DEVICE inline
#endif

namespace tessel::half_bits {

TESSEL_HOST_DEVICE uint16_t F32ToF16(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: quiet, payload truncated (as F16C does)
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs & 0x7FFFFFu) >> 13));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero): value = abs_f / 2^-24
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    // value = mant * 2^(exp - 150) and the half unit is 2^-24: keep mant >> (126 - exp).
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t drop = 126 - exp;  // in [14, 24] here
    uint32_t half = mant >> drop;
    const uint32_t rem = mant & ((1u << drop) - 1);
    const uint32_t halfway = 1u << (drop - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Normal: rebias exponent (127 -> 15), keep 10 mantissa bits, round to even.
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent
  return static_cast<uint16_t>(sign | half);
}

TESSEL_HOST_DEVICE uint32_t F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0);
  if (exp != 0) return sign | ((exp + 112) << 23) | (mant << 13);
  if (mant == 0) return sign;
  int e = -1;  // subnormal: normalise
  do {
    ++e;
    mant <<= 1;
  } while ((mant & 0x400u) == 0);
  return sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3FFu) << 13);
}

TESSEL_HOST_DEVICE uint16_t F32ToBF16(uint32_t x) {
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // qNaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

TESSEL_HOST_DEVICE uint32_t BF16ToF32(uint16_t h) { return static_cast<uint32_t>(h) << 16; }

}  // namespace tessel::half_bits

#undef TESSEL_HOST_DEVICE

#endif  // TESSEL_CORE_HALF_BITS_H_
