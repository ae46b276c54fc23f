#include "core/grad_norm.h"

#include <algorithm>
#include <cmath>
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

GradNormStats ReduceSumWithNorm(const float* const* srcs, int w, float* out, size_t n, int divisor,
                                float grad_scale) {
  const float d = static_cast<float>(divisor);
  const bool scale = grad_scale != 1.0f;
  GradNormStats s;
  bool nan = false;
  const float* block[64];
  std::vector<const float*> many;
  const float** from = block;
  if (w > 64) {
    many.resize(static_cast<size_t>(w));
    from = many.data();
  }
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    for (int j = 0; j < w; ++j) from[j] = srcs[j] + off;
    ReduceSum(from, w, out + off, len);
    double sq = 0, abs_sum = 0;
    float mx = 0;
    for (size_t i = 0; i < len; ++i) {
      float g = out[off + i] / d;     // as core/reduce.cc's DivInto
      if (scale) g = g * grad_scale;  // as core/optimizer.cc's loss-scale pass
      const float a = std::fabs(g);
      sq += static_cast<double>(g) * static_cast<double>(g);
      abs_sum += a;
      nan |= std::isnan(a);
      mx = std::max(mx, a);
    }
    s.sum_sq += sq;
    s.sum_abs += abs_sum;
    s.max_abs = std::max(s.max_abs, static_cast<double>(mx));
  }
  if (nan) s.max_abs = std::numeric_limits<double>::quiet_NaN();
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
