// CUDA optimizer kernels: one thread per parameter, the same arithmetic and
// order as core/optimizer.cc, compiled with -fmad=false so no multiply-add is
// fused (results match the CPU path bit for bit).
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/optimizer_kernels.h"

namespace {

__global__ void SgdKernel(float lr, float momentum, float dampening, int nesterov, float wd,
                          bool first, float* p, const float* g, float* buf, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float d = g[i];
  if (wd != 0.f) d = d + wd * p[i];
  if (momentum != 0.f) {
    float b = first ? d : buf[i] * momentum + (1.f - dampening) * d;
    buf[i] = b;
    d = nesterov ? d + momentum * b : b;
  }
  p[i] = p[i] + (-lr) * d;
}

__global__ void AdamKernel(bool decoupled, float lr, float wd, float beta1, float beta2, float eps,
                           float step_size, float bc2_sqrt, float* p, const float* g, float* m,
                           float* v, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float grad = g[i];
  float param = p[i];
  if (decoupled) {
    param = param * (1.f - lr * wd);
  } else if (wd != 0.f) {
    grad = grad + wd * param;
  }
  float mi = m[i] * beta1 + (1.f - beta1) * grad;
  float vi = v[i] * beta2 + ((1.f - beta2) * grad) * grad;
  float denom = sqrtf(vi) / bc2_sqrt + eps;
  m[i] = mi;
  v[i] = vi;
  p[i] = param + ((-step_size) * mi) / denom;
}

}  // namespace

extern "C" int TesselCudaDeviceCount(int* runtime_version) {
  cudaRuntimeGetVersion(runtime_version);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  return e == cudaSuccess ? n : -static_cast<int>(e);
}

extern "C" int TesselCudaDeviceName(char* buf, int len) {
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) return static_cast<int>(e);
  int i = 0;
  for (; i + 1 < len && prop.name[i]; ++i) buf[i] = prop.name[i];
  buf[i] = '\0';
  return 0;
}

extern "C" int TesselCudaApplyUpdate(int kind, float lr, float momentum, float dampening,
                                     int nesterov, float weight_decay, float beta1, float beta2,
                                     float eps, int64_t step, float* params, const float* grad,
                                     float* state0, float* state1, size_t n) {
  const size_t bytes = n * sizeof(float);
  float *dp = nullptr, *dg = nullptr, *d0 = nullptr, *d1 = nullptr;
  cudaError_t e = cudaMalloc(&dp, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&dg, bytes);
  if (e == cudaSuccess && state0) e = cudaMalloc(&d0, bytes);
  if (e == cudaSuccess && state1) e = cudaMalloc(&d1, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(dp, params, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(dg, grad, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && state0) e = cudaMemcpy(d0, state0, bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && state1) e = cudaMemcpy(d1, state1, bytes, cudaMemcpyHostToDevice);
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  if (e == cudaSuccess && n > 0) {
    if (kind == 0) {
      SgdKernel<<<blocks, threads>>>(lr, momentum, dampening, nesterov, weight_decay, step == 1, dp,
                                     dg, d0, n);
    } else {
      // Scalars computed in double, as torch does, then rounded once.
      const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
      const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
      AdamKernel<<<blocks, threads>>>(kind == 2, lr, weight_decay, beta1, beta2, eps,
                                      static_cast<float>(lr / bc1),
                                      static_cast<float>(std::sqrt(bc2)), dp, dg, d0, d1, n);
    }
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(params, dp, bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && state0) e = cudaMemcpy(state0, d0, bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess && state1) e = cudaMemcpy(state1, d1, bytes, cudaMemcpyDeviceToHost);
  cudaFree(dp);
  cudaFree(dg);
  cudaFree(d0);
  cudaFree(d1);
  return static_cast<int>(e);
}
