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

// --- top-k compression ---------------------------------------------------------

// Elements per chunk of the count and write passes (one block each).
constexpr size_t kTopkChunk = 4096;
constexpr unsigned kPlanThreads = 1024;

// The radix select's state: keys matching `prefix` under `mask` are still
// candidates, and `need` of them are to be taken.
struct TopkSelect {
  uint32_t prefix;
  uint32_t mask;
  uint32_t need;
  uint32_t unused;
};

// The scratch: the select state, a 256-bin histogram, then per chunk the
// count above T, the count at T, how many at T it takes, and its output
// offset.
struct TopkScratch {
  TopkSelect* select;
  uint32_t* histogram;
  uint32_t* greater;
  uint32_t* equal;
  uint32_t* take;
  uint32_t* offset;
};

size_t TopkChunks(size_t n) { return (n + kTopkChunk - 1) / kTopkChunk; }

TopkScratch CarveTopkScratch(void* scratch, size_t n) {
  const size_t chunks = TopkChunks(n);
  auto* base = static_cast<uint32_t*>(scratch);
  TopkScratch t;
  t.select = reinterpret_cast<TopkSelect*>(base);
  t.histogram = base + 4;
  t.greater = t.histogram + 256;
  t.equal = t.greater + chunks;
  t.take = t.equal + chunks;
  t.offset = t.take + chunks;
  return t;
}

// core/topk.h's TopkKey.
__device__ __forceinline__ uint32_t TopkKey(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// Exclusive prefix sum of `v` over the block (blockDim.x a multiple of 32, at
// most 1024); *total = the block's sum. Every thread of the block must call
// it; it synchronises the block.
__device__ uint32_t BlockExclusiveScan(uint32_t v, uint32_t* total) {
  __shared__ uint32_t warp_sums[32];
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x >> 5;
  uint32_t x = v;
  for (unsigned d = 1; d < 32; d <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    const unsigned warps = blockDim.x >> 5;
    uint32_t w = lane < warps ? warp_sums[lane] : 0;
    for (unsigned d = 1; d < 32; d <<= 1) {
      const uint32_t y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    warp_sums[lane] = w;  // inclusive; lanes past the last warp hold the total
  }
  __syncthreads();
  const uint32_t before = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[31];
  __syncthreads();  // warp_sums is free for the next call
  return before + x - v;
}

__global__ void TopkAddKernel(const float* __restrict__ grad, float* __restrict__ residual,
                              size_t n) {
  for (size_t i = FirstIndex(); i < n; i += GridStride()) residual[i] = residual[i] + grad[i];
}

__global__ void TopkInitKernel(TopkScratch t, uint32_t k) {
  if (threadIdx.x == 0) *t.select = TopkSelect{0, 0, k, 0};
  t.histogram[threadIdx.x] = 0;
}

// Counts the candidates' keys by their 8 bits at `shift`.
__global__ void TopkHistogramKernel(const float* __restrict__ residual, size_t n, TopkScratch t,
                                    unsigned shift) {
  __shared__ uint32_t local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = t.select->prefix;
  const uint32_t mask = t.select->mask;
  for (size_t i = FirstIndex(); i < n; i += GridStride()) {
    const uint32_t key = TopkKey(residual[i]);
    if ((key & mask) == prefix) atomicAdd(&local[(key >> shift) & 255u], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&t.histogram[b], local[b]);
  }
}

// One thread: the highest bin whose candidates, with those of the bins
// above it, reach `need` fixes the next 8 bits of T; the bins above are all
// taken. Clears the histogram for the next pass.
__global__ void TopkChooseKernel(TopkScratch t, unsigned shift) {
  TopkSelect s = *t.select;
  uint32_t above = 0;
  for (int b = 255; b >= 0; --b) {
    const uint32_t c = t.histogram[b];
    if (above + c >= s.need) {
      s.prefix |= static_cast<uint32_t>(b) << shift;
      s.mask |= 255u << shift;
      s.need -= above;
      break;
    }
    above += c;
  }
  *t.select = s;
  for (int b = 0; b < 256; ++b) t.histogram[b] = 0;
}

// Block c: how many keys of chunk c are above T and at T.
__global__ void TopkCountKernel(const float* __restrict__ residual, size_t n, TopkScratch t) {
  __shared__ uint32_t greater, equal;
  if (threadIdx.x == 0) greater = equal = 0;
  __syncthreads();
  const uint32_t threshold = t.select->prefix;
  const size_t begin = static_cast<size_t>(blockIdx.x) * kTopkChunk;
  const size_t end = begin + kTopkChunk < n ? begin + kTopkChunk : n;
  uint32_t g = 0, e = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const uint32_t key = TopkKey(residual[i]);
    g += key > threshold;
    e += key == threshold;
  }
  if (g != 0) atomicAdd(&greater, g);
  if (e != 0) atomicAdd(&equal, e);
  __syncthreads();
  if (threadIdx.x == 0) {
    t.greater[blockIdx.x] = greater;
    t.equal[blockIdx.x] = equal;
  }
}

// One block over the chunks in order: the entries at T go to the lowest
// indices first (chunk c takes what `need` leaves after the chunks before
// it), and each chunk's output offset is the sum of the taken entries before
// it.
__global__ void TopkPlanKernel(size_t chunks, TopkScratch t) {
  const uint32_t need = t.select->need;
  uint32_t equal_before = 0, out_before = 0, total = 0;
  for (size_t tile = 0; tile < chunks; tile += blockDim.x) {
    const size_t c = tile + threadIdx.x;
    const uint32_t e = c < chunks ? t.equal[c] : 0;
    const uint32_t at = equal_before + BlockExclusiveScan(e, &total);
    equal_before += total;
    const uint32_t left = need > at ? need - at : 0;
    const uint32_t take = e < left ? e : left;
    const uint32_t taken = c < chunks ? t.greater[c] + take : 0;
    const uint32_t offset = out_before + BlockExclusiveScan(taken, &total);
    out_before += total;
    if (c < chunks) {
      t.take[c] = take;
      t.offset[c] = offset;
    }
  }
}

// Block c writes chunk c's taken entries at its offset, in index order, and
// zeroes them in the residual.
__global__ void TopkWriteKernel(float* __restrict__ residual, size_t n, TopkScratch t,
                                uint32_t* __restrict__ index, float* __restrict__ value) {
  const uint32_t threshold = t.select->prefix;
  const uint32_t take = t.take[blockIdx.x];
  uint32_t equal_before = 0, out = t.offset[blockIdx.x], total = 0;
  const size_t begin = static_cast<size_t>(blockIdx.x) * kTopkChunk;
  const size_t end = begin + kTopkChunk < n ? begin + kTopkChunk : n;
  for (size_t base = begin; base < end; base += blockDim.x) {
    const size_t i = base + threadIdx.x;
    const bool in = i < end;
    const float v = in ? residual[i] : 0.f;
    const uint32_t key = TopkKey(v);
    const bool at = in && key == threshold;
    const uint32_t rank = equal_before + BlockExclusiveScan(at ? 1u : 0u, &total);
    equal_before += total;
    const bool taken = in && (key > threshold || (at && rank < take));
    const uint32_t pos = out + BlockExclusiveScan(taken ? 1u : 0u, &total);
    out += total;
    if (taken) {
      index[pos] = static_cast<uint32_t>(i);
      value[pos] = v;
      residual[i] = 0.f;
    }
  }
}

}  // namespace

size_t TopkScratchBytes(size_t n) { return (4 + 256 + 4 * TopkChunks(n)) * sizeof(uint32_t); }

int LaunchTopkCompress(void* stream, const float* grad, float* residual, size_t n, size_t k,
                       void* scratch, uint8_t* wire) {
  if (k > n || n > 0xffffffffull) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  ClearLastError();
  cudaStream_t s = AsStream(stream);
  TopkAddKernel<<<BlocksFor(n), kThreads, 0, s>>>(grad, residual, n);
  if (k == 0) return cudaGetLastError();
  const TopkScratch t = CarveTopkScratch(scratch, n);
  TopkInitKernel<<<1, 256, 0, s>>>(t, static_cast<uint32_t>(k));
  for (int pass = 3; pass >= 0; --pass) {
    const unsigned shift = 8u * static_cast<unsigned>(pass);
    TopkHistogramKernel<<<BlocksFor(n), kThreads, 0, s>>>(residual, n, t, shift);
    TopkChooseKernel<<<1, 1, 0, s>>>(t, shift);
  }
  const size_t chunks = TopkChunks(n);
  TopkCountKernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(residual, n, t);
  TopkPlanKernel<<<1, kPlanThreads, 0, s>>>(chunks, t);
  auto* index = reinterpret_cast<uint32_t*>(wire);
  auto* value = reinterpret_cast<float*>(wire + 4 * k);
  TopkWriteKernel<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(residual, n, t, index, value);
  return cudaGetLastError();
}

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
