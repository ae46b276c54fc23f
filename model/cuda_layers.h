// The demo MLP's layers on the CUDA device (device_layers.h): cuBLAS
// (gpu/cublas.h, loaded at run time) for the three matrix products, the
// kernels of model/cuda_layer_kernels.h for the rest, all on the CUDA
// device's streams (gpu/cuda_device.h) and recording their failures into its
// sticky error.
//
// Each stream has its own cuBLAS handle, bound to it, so concurrent streams
// never share one; cuBLAS runs in its default math mode (fp32 products in
// fp32, no TF32). The per-row losses of SoftmaxCrossEntropy are scratch from
// the device's stream-ordered pool.
//
// Linking //model:cuda_layers registers OpenCudaLayers with
// OpenDeviceLayers (alwayslink); it also links //gpu:cuda_device.
//
// Thread safety: as device_layers.h; the handles are created when the layers
// open and never change.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(auto layers, OpenDeviceLayers(cuda_device));  // reaches here
#ifndef TESSEL_MODEL_CUDA_LAYERS_H_
#define TESSEL_MODEL_CUDA_LAYERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gpu/device.h"
#include "model/device_layers.h"

namespace tessel::model {

// The layers on `device`, which must be the CUDA device (InvalidArgument
// otherwise) and outlive them. FailedPrecondition when cuBLAS cannot be
// loaded or its handles cannot be made.
absl::StatusOr<std::unique_ptr<DeviceLayers>> OpenCudaLayers(gpu::Device* device);

}  // namespace tessel::model

#endif  // TESSEL_MODEL_CUDA_LAYERS_H_
