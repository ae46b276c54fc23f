#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "model/dataset.h"
#include "model/internal/check.h"
#include "model/internal/random.h"
#include "model/layer_kernels.h"

namespace tessel::model {
namespace {

absl::Status ValidateSizes(const std::vector<int>& sizes) {
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("an MLP needs at least an input and an output size, got {",
                     absl::StrJoin(sizes, ", "), "}"));
  }
  for (int s : sizes) {
    if (s < 1) {
      return absl::InvalidArgumentError(absl::StrCat("every MLP layer size must be >= 1, got {",
                                                     absl::StrJoin(sizes, ", "), "}"));
    }
  }
  return absl::OkStatus();
}

// The per-layer steps of a pass, shared by Mlp and MlpStepper (and, through
// model/layer_kernels.h, by the tensor-parallel split MLP) so that all of
// them compute the same bits. A layer maps input [batch, in] to output
// [batch, out] with weight [out, in] and bias [out].

using kernels::BiasGrad;
using kernels::SoftmaxCrossEntropy;
using kernels::WeightGrad;

// output = input * weight^T + bias, then the ReLU if relu. transposed is
// scratch.
void LayerForward(int batch, int in, int out, const float* input, const float* weight,
                  const float* bias, bool relu, std::vector<float>* output,
                  std::vector<float>* transposed) {
  output->resize(static_cast<size_t>(batch) * out);
  kernels::Linear(batch, in, out, input, weight, bias, output->data(), transposed);
  if (relu) kernels::Relu(output->data(), output->size());
}

// d_input [batch, in] = d_output [batch, out] * weight [out, in], then back
// through the ReLU that produced input (zero where it clipped).
void InputGrad(int batch, int in, int out, const float* d_output, const float* weight,
               const float* input, std::vector<float>* d_input) {
  d_input->resize(static_cast<size_t>(batch) * in);
  kernels::InputGrad(batch, in, out, d_output, weight, d_input->data());
  kernels::ReluMask(input, d_input->data(), d_input->size());
}

// Frees v's memory (clear() keeps the capacity).
template <typename T>
void Release(std::vector<T>* v) {
  std::vector<T>().swap(*v);
}

}  // namespace

// Scratch memory for one forward/backward pass.
struct Mlp::Workspace {
  // activations[l] is the output of layer l, [batch, sizes[l + 1]]: after the
  // ReLU for hidden layers, the logits for the last one.
  std::vector<std::vector<float>> activations;
  // A transposed weight or gradient.
  std::vector<float> transposed;
};

absl::StatusOr<Mlp> Mlp::Create(std::vector<int> sizes) {
  TESSEL_RETURN_IF_ERROR(ValidateSizes(sizes));
  return Mlp(std::move(sizes));
}

Mlp::Mlp(std::vector<int> sizes) : sizes_(std::move(sizes)) {
  const absl::Status status = ValidateSizes(sizes_);
  TESSEL_MODEL_CHECK(status.ok(), status.message());
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    const int64_t in = sizes_[l];
    const int64_t out = sizes_[l + 1];
    const size_t weight_numel = static_cast<size_t>(out * in);
    tensors_.push_back(
        TensorInfo{absl::StrCat("fc", l, ".weight"), {out, in}, num_params_, weight_numel});
    num_params_ += weight_numel;
    tensors_.push_back(
        TensorInfo{absl::StrCat("fc", l, ".bias"), {out}, num_params_, static_cast<size_t>(out)});
    num_params_ += static_cast<size_t>(out);
  }
}

void Mlp::Init(float* params, uint64_t seed) const {
  internal::SplitMix64 rng(seed);
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(sizes_[l]));
    for (const TensorInfo* t : {&tensors_[2 * l], &tensors_[2 * l + 1]}) {
      float* p = params + t->offset;
      for (size_t i = 0; i < t->numel; ++i) {
        // 2u - 1 is exact for u on the 2^-24 grid: U[-1, 1) scaled by bound.
        p[i] = bound * (2.0f * rng.UniformFloat() - 1.0f);
      }
    }
  }
}

std::pair<size_t, size_t> Mlp::LayerRange(int layer) const {
  TESSEL_MODEL_CHECK(layer >= 0 && layer < num_layers(), "layer ", layer, " is outside [0, ",
                     num_layers(), ")");
  const TensorInfo& weight = tensors_[2 * static_cast<size_t>(layer)];
  const TensorInfo& bias = tensors_[2 * static_cast<size_t>(layer) + 1];
  return {weight.offset, weight.numel + bias.numel};
}

void Mlp::Forward(const float* params, const float* x, int batch, Workspace* ws) const {
  TESSEL_MODEL_CHECK(batch >= 1, "batch = ", batch);
  const size_t num_layers = sizes_.size() - 1;
  ws->activations.resize(num_layers);
  const float* input = x;
  for (size_t l = 0; l < num_layers; ++l) {
    LayerForward(batch, sizes_[l], sizes_[l + 1], input, params + tensors_[2 * l].offset,
                 params + tensors_[2 * l + 1].offset, /*relu=*/l + 1 < num_layers,
                 &ws->activations[l], &ws->transposed);
    input = ws->activations[l].data();
  }
}

float Mlp::LossAndGrad(const float* params, const float* x, const int32_t* y, int batch,
                       float* grads) const {
  return LossAndGrad(params, x, y, batch, grads, nullptr);
}

float Mlp::LossAndGrad(const float* params, const float* x, const int32_t* y, int batch,
                       float* grads,
                       const std::function<void(size_t tensor_index)>& on_grad_ready) const {
  Workspace ws;
  Forward(params, x, batch, &ws);
  const size_t num_layers = sizes_.size() - 1;
  const size_t b = static_cast<size_t>(batch);

  // d(loss)/d(output of layer l), before its ReLU; starts at the logits.
  std::vector<float> d_output(b * static_cast<size_t>(num_classes()));
  const float loss =
      SoftmaxCrossEntropy(ws.activations.back().data(), y, batch, num_classes(), d_output.data());
  std::vector<float> d_input;

  for (size_t l = num_layers; l-- > 0;) {
    const int in = sizes_[l];
    const int out = sizes_[l + 1];
    const size_t weight_index = 2 * l;
    const size_t bias_index = 2 * l + 1;
    const float* input = l == 0 ? x : ws.activations[l - 1].data();

    BiasGrad(batch, out, d_output.data(), grads + tensors_[bias_index].offset);
    if (on_grad_ready) on_grad_ready(bias_index);
    WeightGrad(batch, in, out, d_output.data(), input, grads + tensors_[weight_index].offset,
               &ws.transposed);
    if (on_grad_ready) on_grad_ready(weight_index);

    if (l == 0) break;  // Nobody needs d(loss)/d(x).
    InputGrad(batch, in, out, d_output.data(), params + tensors_[weight_index].offset, input,
              &d_input);
    std::swap(d_output, d_input);
  }
  return loss;
}

float Mlp::Loss(const float* params, const float* x, const int32_t* y, int batch) const {
  Workspace ws;
  Forward(params, x, batch, &ws);
  return SoftmaxCrossEntropy(ws.activations.back().data(), y, batch, num_classes(), nullptr);
}

void Mlp::Predict(const float* params, const float* x, int batch, int32_t* predictions) const {
  Workspace ws;
  Forward(params, x, batch, &ws);
  const size_t cs = static_cast<size_t>(num_classes());
  const float* logits = ws.activations.back().data();
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * cs;
    predictions[i] = static_cast<int32_t>(std::max_element(z, z + cs) - z);
  }
}

double Mlp::Accuracy(const float* params, const Dataset& data) const {
  TESSEL_MODEL_CHECK(data.num_features == num_inputs(), "data set has ", data.num_features,
                     " features, the model takes ", num_inputs());
  TESSEL_MODEL_CHECK(data.num_classes == num_classes(), "data set has ", data.num_classes,
                     " classes, the model predicts ", num_classes());
  if (data.size() == 0) return 0.0;
  // Chunks bound the scratch memory for large data sets.
  constexpr size_t kChunk = 256;
  std::vector<int32_t> predictions(kChunk);
  size_t correct = 0;
  for (size_t first = 0; first < data.size(); first += kChunk) {
    const size_t rows = std::min(kChunk, data.size() - first);
    Predict(params, data.x.data() + first * data.num_features, static_cast<int>(rows),
            predictions.data());
    for (size_t i = 0; i < rows; ++i) {
      if (predictions[i] == data.y[first + i]) ++correct;
    }
  }
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

MlpStepper::MlpStepper(const Mlp& model, const float* x, const int32_t* y, int batch)
    : model_(model), batch_(batch), next_backward_(model.num_layers() - 1) {
  TESSEL_MODEL_CHECK(batch >= 1, "batch = ", batch);
  const size_t b = static_cast<size_t>(batch);
  x_.assign(x, x + b * static_cast<size_t>(model_.num_inputs()));
  y_.assign(y, y + b);
  // Checked here as well as in the loss, so that a bad label fails before any
  // parameters are gathered.
  for (size_t i = 0; i < b; ++i) {
    TESSEL_MODEL_CHECK(y_[i] >= 0 && y_[i] < model_.num_classes(), "label ", y_[i], " of row ", i,
                       " is outside [0, ", model_.num_classes(), ")");
  }
  activations_.resize(static_cast<size_t>(model_.num_layers()));
}

std::string MlpStepper::NextCall() const {
  if (next_forward_ < model_.num_layers()) return absl::StrCat("Forward(", next_forward_, ")");
  if (next_backward_ >= 0) return absl::StrCat("Backward(", next_backward_, ") or Loss()");
  return "none (the pass is complete; make a new MlpStepper for the next batch)";
}

void MlpStepper::CheckLayer(const char* method, int layer) const {
  TESSEL_MODEL_CHECK(layer >= 0 && layer < model_.num_layers(), "MlpStepper::", method, "(", layer,
                     "): layer is outside [0, ", model_.num_layers(), ")");
}

void MlpStepper::Forward(int layer, const float* layer_params) {
  CheckLayer("Forward", layer);
  TESSEL_MODEL_CHECK(layer == next_forward_, "MlpStepper::Forward(", layer,
                     ") out of order: the next call must be ", NextCall());
  const size_t l = static_cast<size_t>(layer);
  const std::vector<int>& sizes = model_.sizes();
  const int in = sizes[l];
  const int out = sizes[l + 1];
  const bool last = layer + 1 == model_.num_layers();
  const float* input = layer == 0 ? x_.data() : activations_[l - 1].data();
  LayerForward(batch_, in, out, input, layer_params,
               layer_params + static_cast<size_t>(out) * static_cast<size_t>(in),
               /*relu=*/!last, &activations_[l], &transposed_);
  if (last) {
    d_output_.resize(static_cast<size_t>(batch_) * static_cast<size_t>(out));
    loss_ = SoftmaxCrossEntropy(activations_[l].data(), y_.data(), batch_, out, d_output_.data());
    Release(&activations_[l]);  // The logits feed nothing else.
    Release(&y_);
  }
  ++next_forward_;
}

float MlpStepper::Loss() const {
  TESSEL_MODEL_CHECK(next_forward_ == model_.num_layers(),
                     "MlpStepper::Loss() before the last forward: the next call must be ",
                     NextCall());
  return loss_;
}

void MlpStepper::Backward(int layer, const float* layer_params, float* layer_grads) {
  CheckLayer("Backward", layer);
  TESSEL_MODEL_CHECK(next_forward_ == model_.num_layers() && layer == next_backward_,
                     "MlpStepper::Backward(", layer, ") out of order: the next call must be ",
                     NextCall());
  const size_t l = static_cast<size_t>(layer);
  const std::vector<int>& sizes = model_.sizes();
  const int in = sizes[l];
  const int out = sizes[l + 1];
  const size_t weight_numel = static_cast<size_t>(out) * static_cast<size_t>(in);
  const float* input = layer == 0 ? x_.data() : activations_[l - 1].data();

  // The same steps as Mlp::LossAndGrad, in the same order.
  BiasGrad(batch_, out, d_output_.data(), layer_grads + weight_numel);
  WeightGrad(batch_, in, out, d_output_.data(), input, layer_grads, &transposed_);
  if (layer > 0) {
    InputGrad(batch_, in, out, d_output_.data(), layer_params, input, &d_input_);
    std::swap(d_output_, d_input_);
    Release(&activations_[l - 1]);  // Its last reader was this backward.
  } else {
    Release(&x_);
    Release(&d_output_);
    Release(&d_input_);
    Release(&transposed_);
  }
  --next_backward_;
}

}  // namespace tessel::model
