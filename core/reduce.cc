#include "core/reduce.h"

#include <algorithm>

#include "core/internal/kernel_support.h"
#include "core/optimizer.h"

namespace tessel {
namespace {

TESSEL_VECTOR_CLONES void AddPair(const float* __restrict a, const float* __restrict b,
                                  float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = a[i] + b[i];
}

TESSEL_VECTOR_CLONES void AddInto(const float* __restrict src, float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + src[i];
}

TESSEL_VECTOR_CLONES void DivInto(const float* __restrict acc, float divisor, float* __restrict out,
                                  size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = acc[i] / divisor;
}

// The last rank's add and the division in one pass: out = (a + b) / divisor,
// the same two roundings as AddPair or AddInto followed by DivInto.
TESSEL_VECTOR_CLONES void AddPairDiv(const float* __restrict a, const float* __restrict b,
                                     float divisor, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) / divisor;
}

// Elements per block of the reduction: a float buffer of this many lives on
// the stack and stays in L1 while the block is summed and consumed.
constexpr size_t kBlock = 1024;

// acc[0, len) = the sum of srcs[j][off, off + len), left to right. `acc` is
// scratch of kBlock floats.
void ReduceSumBlock(const float* const* srcs, int w, size_t off, size_t len, float* acc) {
  if (w == 1) {
    std::copy(srcs[0] + off, srcs[0] + off + len, acc);
  } else {
    AddPair(srcs[0] + off, srcs[1] + off, acc, len);
    for (int j = 2; j < w; ++j) AddInto(srcs[j] + off, acc, len);
  }
}

// out[0, len) = that sum divided by `divisor`, in as few passes as the
// order allows: the last add fused with the division, and no scratch for
// w <= 2 (ReduceSumBlock then DivInto, bit for bit). `out` may alias any
// source exactly (then through `acc`, as the kernels' arguments are
// __restrict); `acc` is scratch of kBlock floats.
void ReduceMeanBlock(const float* const* srcs, int w, float divisor, size_t off, size_t len,
                     float* acc, float* out) {
  bool in_place = false;
  for (int j = 0; j < w; ++j) in_place = in_place || srcs[j] + off == out;
  if (in_place) {
    ReduceSumBlock(srcs, w, off, len, acc);
    DivInto(acc, divisor, out, len);
  } else if (w == 1) {
    DivInto(srcs[0] + off, divisor, out, len);
  } else if (w == 2) {
    AddPairDiv(srcs[0] + off, srcs[1] + off, divisor, out, len);
  } else {
    AddPair(srcs[0] + off, srcs[1] + off, acc, len);
    for (int j = 2; j < w - 1; ++j) AddInto(srcs[j] + off, acc, len);
    AddPairDiv(acc, srcs[w - 1] + off, divisor, out, len);
  }
}

}  // namespace

void ReduceMean(const float* const* srcs, int w, float* out, size_t n, int divisor) {
  if (w < 1 || divisor < 0) internal::KernelFatal("ReduceMean: w must be >= 1 and divisor >= 0");
  const float d = static_cast<float>(divisor == 0 ? w : divisor);
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceMeanBlock(srcs, w, d, off, len, acc, out + off);
  }
}

void ReduceSum(const float* const* srcs, int w, float* out, size_t n) {
  if (w < 1) internal::KernelFatal("ReduceSum: w must be >= 1");
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceSumBlock(srcs, w, off, len, acc);
    std::copy(acc, acc + len, out + off);
  }
}

void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n, int divisor) {
  ReduceAndApply(p, step, params, params, srcs, w, state, n, divisor);
}

void ReduceAndApply(const OptimizerParams& p, int64_t step, const float* in, float* out,
                    const float* const* srcs, int w, float* const* state, size_t n, int divisor) {
  if (w < 1 || divisor < 0) {
    internal::KernelFatal("ReduceAndApply: w must be >= 1 and divisor >= 0");
  }
  const float d = static_cast<float>(divisor == 0 ? w : divisor);
  const OptimizerUpdate update(p, step);
  if (n == 0) return;
  // The last rank's add and the division run inside the update's own pass
  // (OptimizerUpdate::RunMean): w = 2 reads the two pushes there directly;
  // w >= 3 sums the ranks before the last into an L1 block first.
  if (w == 2) {
    update.RunMean(in, out, srcs[0], srcs[1], d, state, 0, n);
    return;
  }
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    if (w == 1) {
      DivInto(srcs[0] + off, d, acc, len);
      update.Run(in + off, out + off, acc, state, off, len);
    } else {
      AddPair(srcs[0] + off, srcs[1] + off, acc, len);
      for (int j = 2; j < w - 1; ++j) AddInto(srcs[j] + off, acc, len);
      update.RunMean(in + off, out + off, acc, srcs[w - 1] + off, d, state, off, len);
    }
  }
}

}  // namespace tessel
