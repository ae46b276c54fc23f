// The CUDA optimizer path.
//
// The CUDA kernels (gpu/optimizer_kernels.cu) are compiled and linked with
// nvcc; whether they run is decided at run time. On a machine without a CUDA
// device or driver, DetectCuda() (gpu/detect.h) says why and every caller keeps
// to the CPU kernels (core/optimizer.h), which are the reference implementation.
// This library links the CUDA runtime; binaries that only need to know whether
// a device exists use //gpu:detect alone and link no CUDA.
//
// Example:
//   if (DetectCuda().available) status = ApplyUpdateOnDevice(p, step, ...);
#ifndef TESSEL_GPU_DEVICE_H_
#define TESSEL_GPU_DEVICE_H_

#include "absl/status/status.h"
#include "core/optimizer.h"
#include "gpu/detect.h"

namespace tessel {

// Adam/AdamW/SGD update of n parameters held in host memory, computed on
// device 0 (copy in, kernel, copy out). FailedPrecondition without a device.
// The same arithmetic as ApplyUpdate, in the same order, without FMA
// contraction (nvcc -fmad=false), so results match the CPU path.
absl::Status ApplyUpdateOnDevice(const OptimizerParams& p, int64_t step, float* params,
                                 const float* grad, float* const* state, size_t n);

}  // namespace tessel

#endif  // TESSEL_GPU_DEVICE_H_
