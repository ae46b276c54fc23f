// The CUDA device's elementwise kernels and their launchers: fill, the wire
// casts, pack/unpack and the optimizers (contract: gpu/kernels.h; top-k is
// in topk_kernels.cu).
//
// Built by //gpu:kernels with -fmad=false: nvcc then never fuses a multiply
// and an add into an FMA, and with its defaults (-prec-div=true,
// -prec-sqrt=true, -ftz=false) `/` and sqrtf are IEEE round-to-nearest and
// subnormals are kept. Under those flags every elementwise kernel below
// performs exactly the float operations of the CPU code it mirrors, in the
// same order, and so gives the same bits. Do not build this file with
// --use_fast_math. Launch shape: gpu/cuda_launch.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/half_bits.h"
#include "gpu/cuda_launch.cuh"
#include "gpu/kernels.h"

namespace tessel::gpu::kernels {
namespace {

using launch::AsStream;
using launch::BlocksFor;
using launch::ClearLastError;
using launch::FirstIndex;
using launch::GridStride;
using launch::kThreads;

// --- copies and casts --------------------------------------------------------

__global__ void FillKernel(float* __restrict__ dst, float value, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) dst[i] = value;
}

// core/precision.cc's conversions: the same code (core/half_bits.h).
__device__ __forceinline__ uint16_t FloatToF16(float f) {
  return half_bits::F32ToF16(__float_as_uint(f));
}
__device__ __forceinline__ float F16ToFloat(uint16_t h) {
  return __uint_as_float(half_bits::F16ToF32(h));
}
__device__ __forceinline__ uint16_t FloatToBF16(float f) {
  return half_bits::F32ToBF16(__float_as_uint(f));
}
__device__ __forceinline__ float BF16ToFloat(uint16_t h) {
  return __uint_as_float(half_bits::BF16ToF32(h));
}

template <HalfKind kKind>
__global__ void FloatToHalfKernel(const float* __restrict__ in, uint16_t* __restrict__ out,
                                  size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    out[i] = kKind == kF16 ? FloatToF16(in[i]) : FloatToBF16(in[i]);
  }
}

template <HalfKind kKind>
__global__ void HalfToFloatKernel(const uint16_t* __restrict__ in, float* __restrict__ out,
                                  size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    out[i] = kKind == kF16 ? F16ToFloat(in[i]) : BF16ToFloat(in[i]);
  }
}

// The index of the segment holding packed element i: the last k with
// table[k].offset <= i. Offsets ascend from 0 and no segment is empty, so
// i < table[k].offset + table[k].count for that k whenever i < total.
__device__ __forceinline__ size_t FindSegment(const PackSegment* __restrict__ table,
                                              size_t num_segments, size_t i) {
  size_t lo = 0;
  size_t hi = num_segments - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;  // > lo, so the loop ends
    if (table[mid].offset <= i) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void PackKernel(const PackSegment* __restrict__ table, size_t num_segments, size_t total,
                           float* __restrict__ dst) {
  for (size_t i = FirstIndex(); i < total; i += GridStride()) {
    const PackSegment& s = table[FindSegment(table, num_segments, i)];
    dst[i] = s.data[i - s.offset];
  }
}

__global__ void UnpackKernel(const float* __restrict__ src, const PackSegment* __restrict__ table,
                             size_t num_segments, size_t total) {
  for (size_t i = FirstIndex(); i < total; i += GridStride()) {
    const PackSegment& s = table[FindSegment(table, num_segments, i)];
    s.data[i - s.offset] = src[i];
  }
}

// --- optimizers ------------------------------------------------------------
// One thread per element; each kernel is core/optimizer.cc's kernel of the
// same name with its template flags read from UpdateArgs (uniform over the
// launch, so the branches do not diverge). The statements are the CPU's, in
// the CPU's order.

// Update::Run: the gradient times grad_scale (in float) when scaling.
__device__ __forceinline__ float Grad(const UpdateArgs& a, const float* __restrict__ grad,
                                      size_t i) {
  return a.scale_grad ? grad[i] * a.grad_scale : grad[i];
}

// SgdKernel (no momentum) and SgdMomentumKernel.
__global__ void SgdKernel(UpdateArgs a, float* __restrict__ param, const float* __restrict__ grad,
                          float* __restrict__ buf, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    float d_p = Grad(a, grad, i);
    if (a.has_weight_decay) d_p = d_p + a.weight_decay * param[i];
    if (a.has_momentum) {
      float b;
      if (a.first_step) {
        b = d_p;
      } else {
        b = buf[i] * a.momentum;
        b = b + a.one_minus_dampening * d_p;
      }
      buf[i] = b;
      if (a.nesterov) {
        d_p = d_p + a.momentum * b;
      } else {
        d_p = b;
      }
    }
    param[i] = param[i] + a.neg_lr * d_p;
  }
}

// AdamKernel: Adam (L2 term when has_weight_decay) and AdamW (decoupled:
// param *= decay first, always, as the CPU does).
__global__ void AdamKernel(UpdateArgs a, float* __restrict__ param, const float* __restrict__ grad,
                           float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, size_t n) {
  const bool decoupled = a.kind == kAdamW;
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    float p = param[i];
    float g = Grad(a, grad, i);
    if (decoupled) p = p * a.decay;
    if (!decoupled && a.has_weight_decay) g = g + a.weight_decay * p;
    float m = exp_avg[i] * a.beta1;
    m = m + a.one_minus_beta1 * g;
    float v = exp_avg_sq[i] * a.beta2;
    v = v + (a.one_minus_beta2 * g) * g;  // addcmul: self + (value * t1) * t2
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = sqrtf(v) / a.bc2_sqrt + a.eps;
    param[i] = p + (a.neg_step_size * m) / denom;  // addcdiv: self + (value * t1) / t2
  }
}

// RmspropKernel. `buf` is used when has_momentum, `grad_avg` when centered.
__global__ void RmspropKernel(UpdateArgs a, float* __restrict__ param,
                              const float* __restrict__ grad, float* __restrict__ square_avg,
                              float* __restrict__ buf, float* __restrict__ grad_avg, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    const float p = param[i];
    float g = Grad(a, grad, i);
    if (a.has_weight_decay) g = g + a.weight_decay * p;
    float sq = square_avg[i] * a.alpha;
    sq = sq + (a.one_minus_alpha * g) * g;  // addcmul: self + (value * t1) * t2
    square_avg[i] = sq;
    float avg;
    if (a.centered) {
      float ga = grad_avg[i] * a.alpha;
      ga = ga + a.one_minus_alpha * g;
      grad_avg[i] = ga;
      avg = sqrtf(sq + (-1.0f * ga) * ga);
    } else {
      avg = sqrtf(sq);
    }
    avg = avg + a.eps;
    if (a.has_momentum) {
      float b = buf[i] * a.momentum;
      b = b + (1.0f * g) / avg;  // addcdiv: self + (value * t1) / t2
      buf[i] = b;
      param[i] = p + a.neg_lr * b;
    } else {
      param[i] = p + (a.neg_lr * g) / avg;
    }
  }
}

// AdagradKernel.
__global__ void AdagradKernel(UpdateArgs a, float* __restrict__ param,
                              const float* __restrict__ grad, float* __restrict__ sum, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    const float p = param[i];
    float g = Grad(a, grad, i);
    if (a.has_weight_decay) g = g + a.weight_decay * p;
    const float acc = sum[i] + (1.0f * g) * g;
    sum[i] = acc;
    const float std_dev = sqrtf(acc) + a.eps;
    param[i] = p + (a.neg_clr * g) / std_dev;
  }
}

}  // namespace

int LaunchFill(void* stream, float* dst, float value, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  FillKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(dst, value, n);
  return cudaGetLastError();
}

int LaunchFloatToHalf(void* stream, HalfKind kind, const float* in, uint16_t* out, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  if (kind == kF16) {
    FloatToHalfKernel<kF16><<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(in, out, n);
  } else {
    FloatToHalfKernel<kBF16><<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(in, out, n);
  }
  return cudaGetLastError();
}

int LaunchHalfToFloat(void* stream, HalfKind kind, const uint16_t* in, float* out, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  if (kind == kF16) {
    HalfToFloatKernel<kF16><<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(in, out, n);
  } else {
    HalfToFloatKernel<kBF16><<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(in, out, n);
  }
  return cudaGetLastError();
}

int LaunchPack(void* stream, const PackSegment* table, size_t num_segments, size_t total,
               float* dst) {
  if (total == 0 || num_segments == 0) return cudaSuccess;
  ClearLastError();
  PackKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(table, num_segments, total, dst);
  return cudaGetLastError();
}

int LaunchUnpack(void* stream, const float* src, const PackSegment* table, size_t num_segments,
                 size_t total) {
  if (total == 0 || num_segments == 0) return cudaSuccess;
  ClearLastError();
  UnpackKernel<<<BlocksFor(total), kThreads, 0, AsStream(stream)>>>(src, table, num_segments,
                                                                    total);
  return cudaGetLastError();
}

int LaunchApplyUpdate(void* stream, const UpdateArgs& args, float* params, const float* grad,
                      const UpdateState& state, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  const unsigned blocks = BlocksFor(n);
  cudaStream_t s = AsStream(stream);
  switch (args.kind) {
    case kSgd:
      SgdKernel<<<blocks, kThreads, 0, s>>>(args, params, grad, state.momentum_buffer, n);
      break;
    case kAdam:
    case kAdamW:
      AdamKernel<<<blocks, kThreads, 0, s>>>(args, params, grad, state.exp_avg, state.exp_avg_sq,
                                             n);
      break;
    case kRmsprop:
      RmspropKernel<<<blocks, kThreads, 0, s>>>(args, params, grad, state.square_avg,
                                                state.momentum_buffer, state.grad_avg, n);
      break;
    case kAdagrad:
      AdagradKernel<<<blocks, kThreads, 0, s>>>(args, params, grad, state.sum, n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tessel::gpu::kernels
