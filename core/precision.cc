#include "core/precision.h"

#include <cstring>

#include "core/half_bits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessel {

uint16_t FloatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return half_bits::F32ToF16(x);
}

float F16ToFloat(uint16_t h) {
  const uint32_t x = half_bits::F16ToF32(h);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return half_bits::F32ToBF16(x);
}

float BF16ToFloat(uint16_t h) {
  const uint32_t x = half_bits::BF16ToF32(h);
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

void AddHalfInto(HalfType t, const uint16_t* src, uint16_t* acc, size_t n) {
  constexpr size_t kBlock = 256;  // two float blocks on the stack, in L1
  alignas(64) float a[kBlock];
  alignas(64) float b[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = n - off < kBlock ? n - off : kBlock;
    HalfToFloat(t, acc + off, a, len);
    HalfToFloat(t, src + off, b, len);
    for (size_t i = 0; i < len; ++i) a[i] = a[i] + b[i];
    FloatToHalf(t, a, acc + off, len);
  }
}

}  // namespace tessel
