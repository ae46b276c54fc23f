// The demo MLP's per-layer kernels (model/layer_kernels.h, same shapes and
// meaning) on a compute device (gpu/device.h): the model's own compute,
// enqueued on the device's streams, apart from the worker's device interface.
//
// Two implementations, one test suite (model/device_layers_test.cc):
//   - on the "host" device (model/host_layers.h): model/layer_kernels.h run as
//     tasks on the host device's stream threads: the CPU's results bit for bit.
//   - on the "cuda" device (model/cuda_layers.h, target //model:cuda_layers,
//     which registers itself): cuBLAS (loaded at run time) for the three
//     matrix products, Tessel's kernels for the rest; products within cuBLAS's
//     summation order of the CPU's (docs/gpu.md).
//
// Contract:
//   - Every call only enqueues: its work runs on stream `s` in order with
//     everything else enqueued on `s` (the device's copies, events, other
//     layers). Pointers are the device's memory.
//   - A failure of enqueued work (a bad launch, a cuBLAS error, a negative
//     size) becomes the device's sticky error: the next Synchronize* of the
//     device returns it.
//   - The layers must outlive the work they enqueued; the destructor waits
//     for the device's streams.
//
// Thread safety: as the device's streams (one feeding thread per stream).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceLayers> layers, OpenDeviceLayers(device));
//   layers->Linear(Stream::kCompute, batch, in, out, x, w, b, y);
//   layers->Relu(Stream::kCompute, y, batch * out);
//   TESSEL_RETURN_IF_ERROR(device->SynchronizeStream(Stream::kCompute));
#ifndef TESSEL_MODEL_DEVICE_LAYERS_H_
#define TESSEL_MODEL_DEVICE_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "gpu/device.h"

namespace tessel::model {

class DeviceLayers {
 public:
  virtual ~DeviceLayers() = default;

  // The device whose streams and memory the layers use.
  virtual gpu::Device* device() const = 0;

  // output [batch, out] = input [batch, in] * weight^T [in, out] + bias
  // (bias may be null: no bias).
  virtual void Linear(gpu::Stream s, int batch, int in, int out, const float* input,
                      const float* weight, const float* bias, float* output) = 0;
  // v[i] = max(v[i], 0).
  virtual void Relu(gpu::Stream s, float* v, size_t n) = 0;
  // Mean softmax cross-entropy into *loss (one device float); d(mean loss)/
  // d(logits) into dlogits. Labels must be in [0, classes) (the caller checks
  // them on the host: the device cannot report a bad one).
  virtual void SoftmaxCrossEntropy(gpu::Stream s, const float* logits, const int32_t* y, int batch,
                                   int classes, float* loss, float* dlogits) = 0;
  // d_bias [out] = sum over rows (in order) of d_output [batch, out].
  virtual void BiasGrad(gpu::Stream s, int batch, int out, const float* d_output,
                        float* d_bias) = 0;
  // d_weight [out, in] = d_output^T [out, batch] * input [batch, in] (overwrites).
  virtual void WeightGrad(gpu::Stream s, int batch, int in, int out, const float* d_output,
                          const float* input, float* d_weight) = 0;
  // d_input [batch, in] = d_output [batch, out] * weight [out, in] (overwrites).
  virtual void InputGrad(gpu::Stream s, int batch, int in, int out, const float* d_output,
                         const float* weight, float* d_input) = 0;
  // d[i] = 0 where !(activation[i] > 0).
  virtual void ReluMask(gpu::Stream s, const float* activation, float* d, size_t n) = 0;
};

// The layers for `device` (not owned; must outlive them): the host layers on
// "host"; on "cuda" the CUDA layers when the binary links
// //model:cuda_layers, FailedPrecondition with the reason otherwise (not
// linked in, no cuBLAS). Another kind of device: InvalidArgument.
absl::StatusOr<std::unique_ptr<DeviceLayers>> OpenDeviceLayers(gpu::Device* device);

// Used by //model:cuda_layers to make OpenDeviceLayers reach it on "cuda".
using DeviceLayersFactory = absl::StatusOr<std::unique_ptr<DeviceLayers>> (*)(gpu::Device*);
bool RegisterCudaLayers(DeviceLayersFactory factory);

}  // namespace tessel::model

#endif  // TESSEL_MODEL_DEVICE_LAYERS_H_
