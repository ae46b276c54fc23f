#include "core/precision.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessel {

uint16_t FloatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
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
    const uint32_t drop = 126 - exp;
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

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0);
  } else if (exp != 0) {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    x = sign | static_cast<uint32_t>(112 - e) << 23 | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // qNaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float BF16ToFloat(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void F32ToF16Vec(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToF16(in[i]);
}

__attribute__((target("avx2,f16c"))) void F16ToF32Vec(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = F16ToFloat(in[i]);
}

bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return has;
}
#endif

// AVX2 and default clones picked by an ifunc at load time; not under
// ThreadSanitizer, which cannot run ifunc resolvers.
#if defined(__SANITIZE_THREAD__)
#define TESSEL_CLONES
#else
#define TESSEL_CLONES __attribute__((target_clones("avx2", "default")))
#endif

TESSEL_CLONES void F32ToBF16Loop(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBF16(in[i]);
}

TESSEL_CLONES void BF16ToF32Loop(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BF16ToFloat(in[i]);
}

}  // namespace

void FloatToHalf(HalfType t, const float* in, uint16_t* out, size_t n) {
  if (t == HalfType::kBF16) {
    F32ToBF16Loop(in, out, n);
    return;
  }
#if defined(__x86_64__)
  if (HasF16c()) {
    F32ToF16Vec(in, out, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FloatToF16(in[i]);
}

void HalfToFloat(HalfType t, const uint16_t* in, float* out, size_t n) {
  if (t == HalfType::kBF16) {
    BF16ToF32Loop(in, out, n);
    return;
  }
#if defined(__x86_64__)
  if (HasF16c()) {
    F16ToF32Vec(in, out, n);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) out[i] = F16ToFloat(in[i]);
}

}  // namespace tessel
