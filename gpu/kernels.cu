// The CUDA device's kernels and their launchers (contract: gpu/kernels.h).
//
// Built by //gpu:kernels_a with -fmad=false: nvcc then never fuses a multiply
// and an add into an FMA, and with its defaults (-prec-div=true,
// -prec-sqrt=true, -ftz=false) `/` and sqrtf are IEEE round-to-nearest and
// subnormals are kept. Under those flags every elementwise kernel below
// performs exactly the float operations of the CPU code it mirrors, in the
// same order, and so gives the same bits. Do not build this file with
// --use_fast_math.
//
// Launch shape: elementwise kernels use kThreads threads per block and at
// most kMaxBlocks blocks, each thread walking a grid-stride loop with size_t
// indices; a launcher with nothing to do returns before launching (a grid of
// zero blocks is an error in CUDA).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/half_bits.h"
#include "gpu/kernels.h"

namespace tessel::gpu::kernels {
namespace {

constexpr unsigned kThreads = 256;
// Enough blocks to fill any current GPU several times over; larger arrays are
// covered by the grid-stride loops.
constexpr size_t kMaxBlocks = 65535;

unsigned BlocksFor(size_t n) {
  const size_t blocks = n / kThreads + (n % kThreads != 0 ? 1 : 0);
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Clears this thread's last error before a launch, so that the
// cudaGetLastError() after it reports that launch alone. An error left by an
// earlier call was already returned by that call; a sticky error (a kernel
// fault) is not cleared and fails the launch itself.
void ClearLastError() { (void)cudaGetLastError(); }

__device__ __forceinline__ size_t FirstIndex() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GridStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

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

// --- layer kernels -----------------------------------------------------------

__global__ void BiasRowsKernel(size_t rows, size_t cols, const float* __restrict__ bias,
                               float* __restrict__ output) {
  const size_t n = rows * cols;
  for (size_t i = FirstIndex(); i < n; i += GridStride()) output[i] = bias[i % cols];
}

__global__ void ReluKernel(float* __restrict__ v, size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    const float x = v[i];
    v[i] = x < 0.0f ? 0.0f : x;  // std::max(x, 0.0f)
  }
}

__global__ void ReluMaskKernel(const float* __restrict__ activation, float* __restrict__ d,
                               size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    if (!(activation[i] > 0.0f)) d[i] = 0.0f;
  }
}

// Threads per row of SoftmaxRowsKernel: a power of two (the max reduction
// halves it), at most kRowThreads.
constexpr unsigned kRowThreads = 256;

unsigned RowThreads(int classes) {
  unsigned t = 32;
  while (t < kRowThreads && t < static_cast<unsigned>(classes)) t *= 2;
  return t;
}

// One block per row (blockIdx.x). The CPU's per-row arithmetic:
//   max = max over c of z[c]
//   sum = 0.0f; sum += exp(z[c] - max) for c = 0, 1, ...   (ascending)
//   loss = log(sum) - (z[label] - max)
//   dz[c] = (exp(z[c] - max) / sum - (c == label)) / batch
// The exponentials are computed in parallel into dz (when there is one) and
// summed in class order by thread 0, so the sum's rounding is the CPU's; the
// max is exact in any order (for rows with a NaN both give NaN losses).
// dlogits may be logits itself (in place): z[label] is read before any write,
// and each dz[c] is written only by the thread that read z[c].
__global__ void SoftmaxRowsKernel(const float* logits, const int32_t* __restrict__ y, int batch,
                                  int classes, float* __restrict__ row_loss, float* dlogits) {
  __shared__ float partial[kRowThreads];
  __shared__ float row_sum;
  const size_t row = blockIdx.x;
  const size_t cs = static_cast<size_t>(classes);
  const float* z = logits + row * cs;
  float* dz = dlogits != nullptr ? dlogits + row * cs : nullptr;
  const unsigned t = threadIdx.x;
  const int32_t label = y[row];
  const bool label_ok = label >= 0 && label < classes;
  // Thread 0 reads the label's logit before the __syncthreads below, which
  // every write to dz follows.
  const float z_label = t == 0 && label_ok ? z[label] : 0.0f;

  float m = -INFINITY;
  for (size_t c = t; c < cs; c += blockDim.x) m = fmaxf(m, z[c]);
  partial[t] = m;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) partial[t] = fmaxf(partial[t], partial[t + half]);
    __syncthreads();
  }
  const float max = partial[0];

  if (dz != nullptr) {
    for (size_t c = t; c < cs; c += blockDim.x) dz[c] = expf(z[c] - max);
  }
  // Makes the block's writes to dz visible to thread 0.
  __syncthreads();
  if (t == 0) {
    float sum = 0.0f;
    for (size_t c = 0; c < cs; ++c) sum += dz != nullptr ? dz[c] : expf(z[c] - max);
    row_sum = sum;
    row_loss[row] = label_ok ? logf(sum) - (z_label - max) : NAN;
  }
  __syncthreads();
  if (dz != nullptr) {
    const float sum = row_sum;
    const float rows = static_cast<float>(batch);
    // Each thread reads back the dz[c] it wrote above (same c stride).
    for (size_t c = t; c < cs; c += blockDim.x) {
      const float p = dz[c] / sum;
      const float target = static_cast<int32_t>(c) == label ? 1.0f : 0.0f;
      dz[c] = (p - target) / rows;
    }
  }
}

// One thread: the CPU's `double total; total += loss` over rows in order,
// then float(total / batch).
__global__ void MeanLossKernel(const float* __restrict__ row_loss, int batch,
                               float* __restrict__ loss) {
  double total = 0.0;
  for (int i = 0; i < batch; ++i) total += row_loss[i];
  *loss = static_cast<float>(total / batch);
}

// One thread per column j, summing its rows in ascending order; neighbouring
// threads read neighbouring columns, so each row is read coalesced.
__global__ void BiasGradKernel(size_t rows, size_t cols, const float* __restrict__ d_output,
                               float* __restrict__ d_bias) {
  for (size_t j = FirstIndex(); j < cols; j += GridStride()) {
    float acc = 0.0f;
    for (size_t r = 0; r < rows; ++r) acc += d_output[r * cols + j];
    d_bias[j] = acc;
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

int LaunchBiasRows(void* stream, int batch, int out, const float* bias, float* output) {
  if (batch <= 0 || out <= 0) return cudaSuccess;
  const size_t rows = static_cast<size_t>(batch);
  const size_t cols = static_cast<size_t>(out);
  ClearLastError();
  BiasRowsKernel<<<BlocksFor(rows * cols), kThreads, 0, AsStream(stream)>>>(rows, cols, bias,
                                                                            output);
  return cudaGetLastError();
}

int LaunchRelu(void* stream, float* v, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  ReluKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(v, n);
  return cudaGetLastError();
}

int LaunchReluMask(void* stream, const float* activation, float* d, size_t n) {
  if (n == 0) return cudaSuccess;
  ClearLastError();
  ReluMaskKernel<<<BlocksFor(n), kThreads, 0, AsStream(stream)>>>(activation, d, n);
  return cudaGetLastError();
}

int LaunchSoftmaxCrossEntropy(void* stream, const float* logits, const int32_t* y, int batch,
                              int classes, float* row_loss, float* loss, float* dlogits) {
  if (batch < 0 || classes < 0) return cudaErrorInvalidValue;
  ClearLastError();
  cudaStream_t s = AsStream(stream);
  if (batch > 0) {
    // gridDim.x may be up to 2^31 - 1, so every int batch fits.
    SoftmaxRowsKernel<<<static_cast<unsigned>(batch), RowThreads(classes), 0, s>>>(
        logits, y, batch, classes, row_loss, dlogits);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  // batch == 0: 0.0 / 0, NaN, as on the CPU.
  MeanLossKernel<<<1, 1, 0, s>>>(row_loss, batch, loss);
  return cudaGetLastError();
}

int LaunchBiasGrad(void* stream, int batch, int out, const float* d_output, float* d_bias) {
  if (out <= 0) return cudaSuccess;
  const size_t rows = batch > 0 ? static_cast<size_t>(batch) : 0;
  const size_t cols = static_cast<size_t>(out);
  ClearLastError();
  BiasGradKernel<<<BlocksFor(cols), kThreads, 0, AsStream(stream)>>>(rows, cols, d_output, d_bias);
  return cudaGetLastError();
}

}  // namespace tessel::gpu::kernels
