#include "core/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/reduce.h"

namespace tessel {
namespace {

// Elements reduced, then measured, at a time: the block is still in cache
// when it is read again.
constexpr size_t kBlock = 4096;

}  // namespace

void GradNormStats::Add(const GradNormStats& o) {
  sum_sq += o.sum_sq;
  sum_abs += o.sum_abs;
  // NaN wins (std::max would keep the first operand).
  max_abs = std::isnan(max_abs) || std::isnan(o.max_abs) ? std::numeric_limits<double>::quiet_NaN()
                                                         : std::max(max_abs, o.max_abs);
}

namespace {

// The stats of one block's gradients, g = (o[i] / d) * grad_scale, each
// formed as the update forms it (g * 1.0f is g exactly, so no branch), in
// kLanes float lanes (GCC vector extensions: SSE or AVX registers), the
// lanes summed in lane order: a fixed order for a given length. A NaN or inf
// gradient makes the sums NaN or inf.
constexpr int kLanes = 4;  // one SSE register (every x86-64 CPU)
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t LaneBits __attribute__((vector_size(kLanes * sizeof(float))));

void BlockStats(const float* o, size_t len, float d, float grad_scale, double* sq, double* ab,
                float* mx) {
  // Float lanes take at most kRun / kLanes = 256 terms each before they are
  // added into the double totals (relative error of a lane's sum below
  // 256 ulp, in practice about 16).
  constexpr size_t kRun = 1024;
  const LaneBits magnitude = LaneBits{} + 0x7fffffff;
  double t2 = 0, t1 = 0;
  Lanes m = {};
  size_t i = 0;
  while (i + kLanes <= len) {
    const size_t run_end = std::min(len, i + kRun) / kLanes * kLanes;
    Lanes s2 = {}, s1 = {};
    for (; i < run_end; i += kLanes) {
      Lanes x;
      std::memcpy(&x, o + i, sizeof x);
      const Lanes g = (x / d) * grad_scale;
      const Lanes a = reinterpret_cast<Lanes>(reinterpret_cast<LaneBits>(g) & magnitude);
      s2 += g * g;
      s1 += a;
      m = a > m ? a : m;
    }
    for (int k = 0; k < kLanes; ++k) {
      t2 += s2[k];
      t1 += s1[k];
    }
  }
  float mm = 0;
  for (int k = 0; k < kLanes; ++k) mm = m[k] > mm ? m[k] : mm;
  for (; i < len; ++i) {
    const float g = (o[i] / d) * grad_scale;
    const float a = std::fabs(g);
    t2 += static_cast<double>(g) * g;
    t1 += a;
    mm = a > mm ? a : mm;
  }
  *sq = t2;
  *ab = t1;
  *mx = mm;
}

}  // namespace

GradNormStats ReduceSumWithNorm(const float* const* srcs, int w, float* out, size_t n, int divisor,
                                float grad_scale) {
  const float d = static_cast<float>(divisor);
  GradNormStats s;
  const float* block[64];
  std::vector<const float*> many;
  const float** from = block;
  if (w > 64) {
    many.resize(static_cast<size_t>(w));
    from = many.data();
  }
  // Per block (at most kBlock terms in float), added into double totals.
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    for (int j = 0; j < w; ++j) from[j] = srcs[j] + off;
    ReduceSum(from, w, out + off, len);
    double sq = 0, ab = 0;
    float mx = 0;
    BlockStats(out + off, len, d, grad_scale, &sq, &ab, &mx);
    s.sum_sq += sq;
    s.sum_abs += ab;
    s.max_abs = std::max(s.max_abs, static_cast<double>(mx));
  }
  if (std::isnan(s.sum_abs)) s.max_abs = std::numeric_limits<double>::quiet_NaN();
  return s;
}

bool IsSupportedNormType(double norm_type) {
  return norm_type == 1.0 || norm_type == 2.0 ||
         norm_type == std::numeric_limits<double>::infinity();
}

double NormOf(const GradNormStats& s, double norm_type) {
  if (norm_type == 1.0) return s.sum_abs;
  if (norm_type == 2.0) return std::sqrt(s.sum_sq);
  if (norm_type == std::numeric_limits<double>::infinity()) return s.max_abs;
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace tessel
