// The CUDA device's top-k compression kernels and their launcher (contract:
// gpu/kernels.h, LaunchTopkCompress): a radix select over the keys, then
// per-chunk counts, one plan block and per-chunk writes in index order.
// Integer comparisons and one IEEE addition (nvcc -fmad=false, as
// kernels.cu): core/topk.h's bits. Launch shape: gpu/cuda_launch.cuh.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

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

}  // namespace tessel::gpu::kernels
