// The demo MLP (model/mlp.h) on a compute device (gpu/device.h): forward and
// backward of one batch, one layer at a time, enqueued on the device's
// compute stream through the model's layers on that device
// (model/device_layers.h). Parameters and gradients are device pointers owned by the
// caller (a flat vector in Mlp's layout, or one layer's slice); the model
// owns the batch, the activations and the gradient flowing back.
//
// The calls run the layer kernels in exactly Mlp::LossAndGrad's order, so on
// the "host" device the loss and gradients are Mlp's bit for bit, and on
// "cuda" they differ only by cuBLAS's summation order (docs/gpu.md).
//
// Per batch, in this order (L = model.num_layers()):
//   SetBatch(x, y);
//   Forward(0, p0) ... Forward(L - 1, pL-1);   // the last one also the loss
//   Backward(L - 1, pL-1, gL-1) ... Backward(0, p0, g0);
//   Loss();                                    // waits for the compute stream
// where pl = the device address of model.LayerRange(l) (weight then bias)
// and gl the same for gradients. Nothing is checked on the device: the calls
// are only enqueued, and a caller that wants to overlap (worker/
// device_staging.h) records events between them.
//
// Thread safety: one thread at a time.
#ifndef TESSEL_MODEL_DEVICE_MLP_H_
#define TESSEL_MODEL_DEVICE_MLP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "gpu/device.h"
#include "model/device_layers.h"
#include "model/mlp.h"

namespace tessel::model {

class DeviceMlp {
 public:
  // Allocates the batch and activation buffers for `batch` rows on the
  // layers' device. The second form opens the layers (OpenDeviceLayers):
  // FailedPrecondition where the device has none (CUDA without cuBLAS, or
  // a binary without //model:cuda_layers).
  static absl::StatusOr<std::unique_ptr<DeviceMlp>> Create(const Mlp& model,
                                                           std::unique_ptr<DeviceLayers> layers,
                                                           int batch);
  static absl::StatusOr<std::unique_ptr<DeviceMlp>> Create(const Mlp& model, gpu::Device* device,
                                                           int batch);
  ~DeviceMlp();

  const Mlp& model() const { return model_; }
  int batch() const { return batch_; }

  // Copies the batch (x row-major [batch, inputs], labels in [0, classes))
  // to the device on the compute stream. InvalidArgument for a label out of
  // range (nothing enqueued).
  absl::Status SetBatch(const float* x, const int32_t* y);
  void Forward(int layer, const float* layer_params);
  void Backward(int layer, const float* layer_params, float* layer_grads);
  // The batch's mean loss: waits for everything enqueued on the compute
  // stream so far; an asynchronous device error is returned here.
  absl::StatusOr<float> Loss();

 private:
  DeviceMlp(const Mlp& model, std::unique_ptr<DeviceLayers> layers, int batch);

  Mlp model_;
  std::unique_ptr<DeviceLayers> layers_;
  gpu::Device* device_;  // layers_->device()
  int batch_;
  gpu::DeviceBuffer<float> x_;
  gpu::DeviceBuffer<int32_t> y_;
  // activations_[l]: layer l's output after its ReLU (the logits for the last).
  std::vector<gpu::DeviceBuffer<float>> activations_;
  gpu::DeviceBuffer<float> d_output_, d_input_;  // [batch, widest layer]
  gpu::DeviceBuffer<float> loss_;
  // Pinned host staging of the batch and the loss; the batch is rewritten
  // only after the previous copy from it completed (batch_copied_).
  std::vector<float> host_x_;
  std::vector<int32_t> host_y_;
  std::vector<float> host_loss_;
  std::unique_ptr<gpu::Event> batch_copied_;
};

}  // namespace tessel::model

#endif  // TESSEL_MODEL_DEVICE_MLP_H_
