// Reductions of gradients over ranks, in a fixed order: the sum and the mean
// of w float vectors, and the mean fused with an optimizer update. Shard
// servers reduce the ranks' gradients with them; workers and tests compute
// the expected means with the very same code.
//
// Contract:
//   - Sums run left to right in float (srcs[0] + srcs[1] + ... + srcs[w-1])
//     and means divide the sum (never multiply by 1 / divisor), so a result is
//     one fixed IEEE expression per element: bitwise the same on every x86-64
//     CPU, for every n, alignment and block split (built like the optimizer
//     kernels, core/internal/kernel_support.h).
//   - The caller owns all buffers; nothing is allocated on the heap, no
//     threads, no I/O; any thread may call on buffers no other thread touches.
//   - w >= 1 and divisor >= 0 (0 means w); anything else aborts (a caller's
//     bug). `out` may be exactly one of the sources (in-place reduction) but
//     must not partially overlap any of them.
//
// Example:
//   const float* grads[] = {rank0.data(), rank1.data()};
//   ReduceMean(grads, 2, mean.data(), n);                  // (g0 + g1) / 2
//   ReduceAndApply(p, step, params, grads, 2, state, n);   // and the update
#ifndef TESSEL_CORE_REDUCE_H_
#define TESSEL_CORE_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "core/optimizer_params.h"

namespace tessel {

// out[i] = (srcs[0][i] + srcs[1][i] + ... + srcs[w-1][i]) / divisor, summed
// left to right in float and divided (not multiplied by 1/divisor); divisor
// 0 means w. w >= 1. `out` may be exactly one of the sources (in-place
// reduction) but must not partially overlap any of them.
//
// Prefix order: with divisor = W, srcs[0] may be a ReduceSum of ranks
// [0, k) and srcs[1..] ranks k..W-1: the result is the same bits as the
// mean over all W ranks, because the sum is the same left-to-right fold.
void ReduceMean(const float* const* srcs, int w, float* out, size_t n, int divisor = 0);

// out[i] = srcs[0][i] + srcs[1][i] + ... + srcs[w-1][i], left to right in
// float (the first part of ReduceMean, kept for a later one). w >= 1; `out`
// may be exactly one of the sources.
void ReduceSum(const float* const* srcs, int w, float* out, size_t n);

// ReduceMean into a gradient followed by ApplyUpdate (core/optimizer.h),
// fused so the gradient never goes to memory. Bitwise identical to
//   ReduceMean(srcs, w, grad, n, divisor);
//   ApplyUpdate(p, step, params, grad, state, n);
// Aborts on step < 1, as ApplyUpdate does.
void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n, int divisor = 0);
// The same out of place: the parameters read from in[0, n), the updated
// ones written to out[0, n) (OptimizerUpdate::Run's out-of-place form); the
// bits of the in-place call. in == out is that call.
void ReduceAndApply(const OptimizerParams& p, int64_t step, const float* in, float* out,
                    const float* const* srcs, int w, float* const* state, size_t n,
                    int divisor = 0);

}  // namespace tessel

#endif  // TESSEL_CORE_REDUCE_H_
