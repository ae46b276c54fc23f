// GPU detection and the CUDA optimizer path.
//
// The CUDA kernels (gpu/optimizer_kernels.cu) are always compiled and linked
// with nvcc; whether they run is decided at run time. On a machine without a
// CUDA device or driver, DetectCuda() says why and every caller keeps to the
// CPU kernels (core/optimizer.h), which are the reference implementation.
//
// Example:
//   CudaInfo cuda = DetectCuda();
//   if (!cuda.available) LOG << "optimizer on CPU: " << cuda.reason;
#ifndef TESSEL_GPU_DEVICE_H_
#define TESSEL_GPU_DEVICE_H_

#include <string>

#include "absl/status/status.h"
#include "core/optimizer.h"

namespace tessel {

struct CudaInfo {
  bool available = false;
  int devices = 0;
  int runtime_version = 0;  // e.g. 13000
  std::string reason;       // why not available, or the device name
};

CudaInfo DetectCuda();

// Adam/AdamW/SGD update of n parameters held in host memory, computed on
// device 0 (copy in, kernel, copy out). FailedPrecondition without a device.
// The same arithmetic as ApplyUpdate, in the same order, without FMA
// contraction (nvcc -fmad=false), so results match the CPU path.
absl::Status ApplyUpdateOnDevice(const OptimizerParams& p, int64_t step, float* params,
                                 const float* grad, float* const* state, size_t n);

}  // namespace tessel

#endif  // TESSEL_GPU_DEVICE_H_
