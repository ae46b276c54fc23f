// The job-wide gradient norm of a held step (clipping, server/step_hold.h),
// taken where the reduced gradient lives: each shard server reduces a held
// bucket's pushes into a buffer and measures its share of the step's mean
// gradient at once; a worker combines the shards' (and parameter groups')
// shares into the norm torch.nn.utils.clip_grad_norm_ would take.
//
// Contract:
//   - ReduceSumWithNorm writes the left-to-right sum of the ranks' pushes
//     (ReduceSum's bits, so an update that later reads it as its only source
//     with divisor W gives ReduceAndApply's bits) and returns the stats of
//     the gradient the update will use, g = float(sum / divisor), times
//     grad_scale in float when grad_scale != 1 (loss scaling's unscale):
//     each element formed exactly as core/optimizer.cc forms it, summed in
//     double.
//   - NormOf(stats, p) is (sum |g|^p)^(1/p) for p = 1 and 2, max |g| for p =
//     inf; other norm types are refused by IsSupportedNormType (a norm needs
//     its p when the sums are taken, and these are the three torch scripts
//     use). A NaN or inf gradient gives a NaN or inf norm (the caller's
//     overflow check).
//   - Stats add (Add) in any grouping; combine shards in shard order and
//     groups in group order for a result every rank agrees on bitwise.
//
// Threads: pure functions on the caller's buffers.
//
// Example:
//   GradNormStats s = ReduceSumWithNorm(srcs, w, held, n, w, 1.0f);
//   total.Add(s);  ...  double norm = NormOf(total, 2.0);
#ifndef TESSEL_CORE_GRAD_NORM_H_
#define TESSEL_CORE_GRAD_NORM_H_

#include <cstddef>

namespace tessel {

struct GradNormStats {
  double sum_sq = 0;   // sum of g^2
  double sum_abs = 0;  // sum of |g|
  double max_abs = 0;  // largest |g| (NaN if any g is NaN)

  void Add(const GradNormStats& o);
};

// out[0, n) = srcs[0] + ... + srcs[w-1] (left to right, in float); returns
// the stats of float(out[i] / divisor) * grad_scale (the multiply only when
// grad_scale != 1). w >= 1, divisor >= 1.
GradNormStats ReduceSumWithNorm(const float* const* srcs, int w, float* out, size_t n, int divisor,
                                float grad_scale);

bool IsSupportedNormType(double norm_type);
// The norm of type `norm_type` (1, 2 or +inf) of the gradient `s` describes.
double NormOf(const GradNormStats& s, double norm_type);

}  // namespace tessel

#endif  // TESSEL_CORE_GRAD_NORM_H_
