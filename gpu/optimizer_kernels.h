// C ABI of the nvcc-compiled kernels (gpu/optimizer_kernels.cu). Internal to
// //gpu: callers use device.h.
#ifndef TESSEL_GPU_OPTIMIZER_KERNELS_H_
#define TESSEL_GPU_OPTIMIZER_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

extern "C" {
// Returns the device count, or -cudaError_t.
int TesselCudaDeviceCount(int* runtime_version);
// Device name of device 0 into buf (NUL-terminated).
int TesselCudaDeviceName(char* buf, int len);
// kind: 0 sgd, 1 adam, 2 adamw. Host pointers; returns cudaError_t (0 = ok).
int TesselCudaApplyUpdate(int kind, float lr, float momentum, float dampening, int nesterov,
                          float weight_decay, float beta1, float beta2, float eps, int64_t step,
                          float* params, const float* grad, float* state0, float* state1, size_t n);
}

#endif  // TESSEL_GPU_OPTIMIZER_KERNELS_H_
