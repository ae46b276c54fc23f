// The demo MLP's elementwise layer kernels and their launchers (contract:
// model/cuda_layer_kernels.h).
//
// Built by //model:cuda_layer_kernels (gpu/cuda.bzl) with -fmad=false and
// nvcc's IEEE division and square root: each kernel performs the float
// operations of model/layer_kernels.cc in the same order. Do not build this
// file with --use_fast_math. Launch shape: gpu/cuda_launch.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gpu/cuda_launch.cuh"
#include "model/cuda_layer_kernels.h"

namespace tessel::model::cuda_kernels {
namespace {

using gpu::launch::AsStream;
using gpu::launch::BlocksFor;
using gpu::launch::ClearLastError;
using gpu::launch::FirstIndex;
using gpu::launch::GridStride;
using gpu::launch::kThreads;

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

}  // namespace tessel::model::cuda_kernels
