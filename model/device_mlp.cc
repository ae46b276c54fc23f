#include "model/device_mlp.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "runtime/log.h"

namespace tessel::model {

using gpu::Stream;

DeviceMlp::DeviceMlp(const Mlp& model, std::unique_ptr<DeviceLayers> layers, int batch)
    : model_(model), layers_(std::move(layers)), device_(layers_->device()), batch_(batch) {}

DeviceMlp::~DeviceMlp() {
  // Nothing may still read or write the buffers being freed.
  if (absl::Status s = device_->SynchronizeStream(Stream::kCompute); !s.ok()) {
    TESSEL_LOG(WARNING) << "DeviceMlp: waiting for the compute stream before freeing the "
                        << "model's buffers failed: " << s;
  }
  device_->UnpinHost(host_x_.data());
  device_->UnpinHost(host_y_.data());
  device_->UnpinHost(host_loss_.data());
}

absl::StatusOr<std::unique_ptr<DeviceMlp>> DeviceMlp::Create(const Mlp& model, gpu::Device* device,
                                                             int batch) {
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<DeviceLayers> layers, OpenDeviceLayers(device));
  return Create(model, std::move(layers), batch);
}

absl::StatusOr<std::unique_ptr<DeviceMlp>> DeviceMlp::Create(const Mlp& model,
                                                             std::unique_ptr<DeviceLayers> layers,
                                                             int batch) {
  if (batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("batch = ", batch, "; must be >= 1"));
  if (layers == nullptr) return absl::InvalidArgumentError("DeviceMlp: no layers");
  gpu::Device* device = layers->device();
  std::unique_ptr<DeviceMlp> m(new DeviceMlp(model, std::move(layers), batch));
  const std::vector<int>& sizes = model.sizes();
  const size_t rows = static_cast<size_t>(batch);
  const size_t widest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  auto alloc = [&](gpu::DeviceBuffer<float>* b, size_t n) -> absl::Status {
    TESSEL_ASSIGN_OR_RETURN(*b, gpu::DeviceBuffer<float>::Create(device, n));
    return absl::OkStatus();
  };
  TESSEL_RETURN_IF_ERROR(alloc(&m->x_, rows * sizes.front()));
  TESSEL_ASSIGN_OR_RETURN(m->y_, gpu::DeviceBuffer<int32_t>::Create(device, rows));
  m->activations_.resize(sizes.size() - 1);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    TESSEL_RETURN_IF_ERROR(alloc(&m->activations_[l], rows * sizes[l + 1]));
  }
  TESSEL_RETURN_IF_ERROR(alloc(&m->d_output_, rows * widest));
  TESSEL_RETURN_IF_ERROR(alloc(&m->d_input_, rows * widest));
  TESSEL_RETURN_IF_ERROR(alloc(&m->loss_, 1));
  m->host_x_.resize(rows * sizes.front());
  m->host_y_.resize(rows);
  m->host_loss_.resize(1);
  for (auto [p, bytes] : {std::pair<void*, size_t>{m->host_x_.data(), m->host_x_.size() * 4},
                          {m->host_y_.data(), m->host_y_.size() * 4},
                          {m->host_loss_.data(), 4}}) {
    TESSEL_RETURN_IF_ERROR(device->PinHost(p, bytes));
  }
  m->batch_copied_ = device->NewEvent();
  return m;
}

absl::Status DeviceMlp::SetBatch(const float* x, const int32_t* y) {
  for (int i = 0; i < batch_; ++i) {
    if (y[i] < 0 || y[i] >= model_.num_classes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", y[i], " of row ", i, " is outside [0, ", model_.num_classes(), ")"));
    }
  }
  TESSEL_RETURN_IF_ERROR(device_->Synchronize(batch_copied_.get()));
  std::copy(x, x + host_x_.size(), host_x_.begin());
  std::copy(y, y + host_y_.size(), host_y_.begin());
  device_->CopyToDevice(Stream::kCompute, x_.data(), host_x_.data(),
                        host_x_.size() * sizeof(float));
  device_->CopyToDevice(Stream::kCompute, y_.data(), host_y_.data(), host_y_.size() * 4);
  device_->Record(Stream::kCompute, batch_copied_.get());
  return absl::OkStatus();
}

void DeviceMlp::Forward(int layer, const float* layer_params) {
  const std::vector<int>& sizes = model_.sizes();
  const int in = sizes[layer], out = sizes[layer + 1];
  const float* weight = layer_params;
  const float* bias = layer_params + static_cast<size_t>(in) * out;
  const float* input = layer == 0 ? x_.data() : activations_[layer - 1].data();
  float* output = activations_[layer].data();
  const size_t n = static_cast<size_t>(batch_) * out;
  layers_->Linear(Stream::kCompute, batch_, in, out, input, weight, bias, output);
  if (layer + 1 < model_.num_layers()) {
    layers_->Relu(Stream::kCompute, output, n);
  } else {
    layers_->SoftmaxCrossEntropy(Stream::kCompute, output, y_.data(), batch_, out, loss_.data(),
                                 d_output_.data());
    device_->CopyToHost(Stream::kCompute, host_loss_.data(), loss_.data(), sizeof(float));
  }
}

void DeviceMlp::Backward(int layer, const float* layer_params, float* layer_grads) {
  // Mlp::LossAndGrad's order: bias gradient, weight gradient, then the
  // gradient for the layer below, back through its ReLU.
  const std::vector<int>& sizes = model_.sizes();
  const int in = sizes[layer], out = sizes[layer + 1];
  const size_t weight_numel = static_cast<size_t>(in) * out;
  const float* input = layer == 0 ? x_.data() : activations_[layer - 1].data();
  layers_->BiasGrad(Stream::kCompute, batch_, out, d_output_.data(), layer_grads + weight_numel);
  layers_->WeightGrad(Stream::kCompute, batch_, in, out, d_output_.data(), input, layer_grads);
  if (layer == 0) return;  // nobody needs d(loss)/d(x)
  layers_->InputGrad(Stream::kCompute, batch_, in, out, d_output_.data(), layer_params,
                     d_input_.data());
  layers_->ReluMask(Stream::kCompute, input, d_input_.data(), static_cast<size_t>(batch_) * in);
  std::swap(d_output_, d_input_);
}

absl::StatusOr<float> DeviceMlp::Loss() {
  TESSEL_RETURN_IF_ERROR(device_->SynchronizeStream(Stream::kCompute));
  return host_loss_[0];
}

}  // namespace tessel::model
