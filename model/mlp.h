// A multi-layer perceptron classifier with hand-written forward and backward,
// the model the Tessel demo trains.
//
// Layers are fully connected with ReLU between them and softmax cross-entropy
// on the last one; the loss is the mean over the batch. The model owns no
// parameters: they live in one flat float vector owned by the caller (the
// layout a Tessel job registers), and the model only reads it. tensors()
// describes that vector, in order:
//   fc0.weight [sizes[1], sizes[0]], fc0.bias [sizes[1]],
//   fc1.weight [sizes[2], sizes[1]], fc1.bias [sizes[2]], ...
// packed contiguously from offset 0. Weights are [out, in] row-major (as in
// torch.nn.Linear): output j of layer l is b[j] + sum_k W[j][k] * input[k].
//
// Results are bitwise reproducible: every sum runs in a fixed order, the
// library is compiled without FMA contraction (-ffp-contract=off), and
// vectorisation only spreads independent outputs across lanes, so the same
// inputs give the same bits on every run and at every SIMD width. (Across
// machines, the only other ingredient is libm's expf/logf in the softmax.)
//
// Example:
//   Mlp model({64, 256, 256, 10});
//   std::vector<float> params(model.num_params()), grads(model.num_params());
//   model.Init(params.data(), /*seed=*/0);
//   Dataset batch = Batch(train, step, rank, world_size, 32);
//   float loss = model.LossAndGrad(params.data(), batch.x.data(),
//                                  batch.y.data(), 32, grads.data());
//   for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.05f * grads[i];
//
// Thread safety: an Mlp is immutable after construction; every const method
// may run concurrently with the others (each call allocates its own scratch
// memory). Single-threaded inside.
//
// MlpStepper, below, runs the same pass one layer at a time for callers that
// hold only one layer's parameters at once (FSDP, ZeRO-3).

#ifndef TESSEL_MODEL_MLP_H_
#define TESSEL_MODEL_MLP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/dataset.h"

namespace tessel::model {

// One tensor of the flat parameter vector.
struct TensorInfo {
  std::string name;            // "fc<l>.weight" or "fc<l>.bias".
  std::vector<int64_t> shape;  // [out, in] or [out].
  size_t offset;               // In floats, from the start of the vector.
  size_t numel;
};

class Mlp {
 public:
  // sizes = {inputs, hidden..., classes}: at least two entries, all >= 1.
  // Returns InvalidArgument otherwise.
  static absl::StatusOr<Mlp> Create(std::vector<int> sizes);

  // As Create, for sizes fixed in code; aborts if they are invalid.
  explicit Mlp(std::vector<int> sizes);

  const std::vector<int>& sizes() const { return sizes_; }
  int num_inputs() const { return sizes_.front(); }
  int num_classes() const { return sizes_.back(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t num_params() const { return num_params_; }

  // Number of fully connected layers: sizes().size() - 1.
  int num_layers() const { return static_cast<int>(sizes_.size()) - 1; }

  // {offset, numel} of layer `layer`'s slice of the flat vector: its weight
  // followed by its bias, from tensors()[2 * layer].offset to the end of
  // tensors()[2 * layer + 1]. Aborts unless 0 <= layer < num_layers().
  std::pair<size_t, size_t> LayerRange(int layer) const;

  // Writes num_params() floats: torch.nn.Linear's default initialisation,
  // U(-1/sqrt(in), 1/sqrt(in)) for both weight and bias of each layer, drawn
  // from this library's own PRNG (same seed, same bits everywhere).
  void Init(float* params, uint64_t seed) const;

  // Forward and backward over a batch. x is row-major [batch, num_inputs()],
  // y holds batch labels in [0, num_classes()), batch >= 1. Overwrites all
  // num_params() entries of grads with d(loss)/d(params) and returns the mean
  // loss. grads must not overlap params or x.
  float LossAndGrad(const float* params, const float* x, const int32_t* y, int batch,
                    float* grads) const;

  // As above, and calls on_grad_ready(i) on the calling thread as soon as the
  // gradient of tensors()[i] is final: once per tensor, in reverse order
  // (last layer's bias first, fc0.weight last), so a caller can start sending
  // gradients while backward continues. During and after the call,
  // LossAndGrad no longer writes that tensor's range of grads (other ranges
  // are still being written). The callback must not write to grads, and
  // should return quickly: backward waits for it.
  float LossAndGrad(const float* params, const float* x, const int32_t* y, int batch, float* grads,
                    const std::function<void(size_t tensor_index)>& on_grad_ready) const;

  // The mean loss alone (forward only). Same value, bit for bit, as the one
  // LossAndGrad returns.
  float Loss(const float* params, const float* x, const int32_t* y, int batch) const;

  // Writes the predicted class (argmax of the logits; ties to the lowest
  // class) of each of the batch rows of x to predictions.
  void Predict(const float* params, const float* x, int batch, int32_t* predictions) const;

  // Fraction of rows of data whose prediction equals the label; 0 for an
  // empty data set. data must have num_inputs() features and num_classes()
  // classes.
  double Accuracy(const float* params, const Dataset& data) const;

 private:
  struct Workspace;

  // Fills ws->activations for a batch; the last one holds the logits.
  void Forward(const float* params, const float* x, int batch, Workspace* ws) const;

  std::vector<int> sizes_;
  std::vector<TensorInfo> tensors_;
  size_t num_params_ = 0;
};

// One forward and backward pass of an Mlp over a batch, run one layer at a
// time, for fully sharded data parallelism (FSDP, ZeRO-3): a layer's
// parameters are gathered just before its forward, dropped after it, and
// gathered again just before its backward, so only one layer's parameters
// need to be in memory at once.
//
// Every call gets just its layer's parameters: the slice of the flat vector
// at model.LayerRange(layer), weight [out, in] then bias [out]. The stepper
// keeps no pointer to them after the call returns, so each call may get a
// fresh copy at a different address. What the pass needs between forward and
// backward (a copy of the batch, each layer's output, the gradient flowing
// back) the stepper owns.
//
// The calls must come in this order, for L = model.num_layers():
//   Forward(0), Forward(1), ..., Forward(L - 1),
//   Backward(L - 1), Backward(L - 2), ..., Backward(0)
// with Loss() allowed anywhere after Forward(L - 1). Any other call (out of
// order, repeated, a layer outside [0, L)) aborts. A stepper runs one pass;
// make a new one for the next batch.
//
// The loss and gradients are those Mlp::LossAndGrad computes for the same
// inputs, bit for bit: both run the same per-layer kernels in the same order.
//
// Memory: the batch and the outputs of layers 0..L-2 ([batch, sizes[l + 1]]
// floats each) are kept from their forward until the backward that last reads
// them (layer l's output is released by Backward(l + 1)); the logits are
// released once Forward(L - 1) has turned them into the loss and its gradient.
//
// Example:
//   MlpStepper stepper(model, batch.x.data(), batch.y.data(), 32);
//   std::vector<float> layer, layer_grads;
//   for (int l = 0; l < model.num_layers(); ++l) {
//     layer = GatherLayer(l);  // model.LayerRange(l).second floats.
//     stepper.Forward(l, layer.data());
//   }
//   float loss = stepper.Loss();
//   for (int l = model.num_layers() - 1; l >= 0; --l) {
//     layer = GatherLayer(l);
//     layer_grads.resize(model.LayerRange(l).second);
//     stepper.Backward(l, layer.data(), layer_grads.data());
//     PushGrads(l, layer_grads);
//   }
//
// Thread safety: none; one thread at a time calls a stepper (it may move
// between threads with the caller's synchronisation). Steppers of the same
// Mlp are independent.
class MlpStepper {
 public:
  // x is row-major [batch, model.num_inputs()], y holds batch labels in
  // [0, model.num_classes()), batch >= 1; aborts otherwise. Copies model, x
  // and y: none of them need outlive the constructor call.
  MlpStepper(const Mlp& model, const float* x, const int32_t* y, int batch);

  MlpStepper(const MlpStepper&) = delete;
  MlpStepper& operator=(const MlpStepper&) = delete;
  MlpStepper(MlpStepper&&) = default;
  MlpStepper& operator=(MlpStepper&&) = default;

  // Runs layer `layer` forward. layer_params holds model.LayerRange(layer)
  // .second floats: the layer's weight then its bias. Layers in order 0..L-1.
  void Forward(int layer, const float* layer_params);

  // The mean loss over the batch, the value LossAndGrad returns. Only after
  // Forward(L - 1).
  float Loss() const;

  // Runs layer `layer` backward, in order L-1..0 after the last Forward.
  // layer_params holds the layer's parameters as for Forward (the same
  // values; the address may differ). Overwrites the
  // model.LayerRange(layer).second floats of layer_grads with d(loss)/d(weight)
  // then d(loss)/d(bias). layer_grads must not overlap layer_params.
  void Backward(int layer, const float* layer_params, float* layer_grads);

 private:
  // The call the sequence above expects next, for error messages.
  std::string NextCall() const;
  void CheckLayer(const char* method, int layer) const;

  Mlp model_;
  int batch_;
  std::vector<float> x_;
  std::vector<int32_t> y_;
  // activations_[l] is the output of layer l, [batch, sizes[l + 1]], after
  // its ReLU; empty before its forward and after it is released.
  std::vector<std::vector<float>> activations_;
  // From Forward(L - 1) on: d(loss)/d(output of layer next_backward_), before
  // its ReLU.
  std::vector<float> d_output_;
  std::vector<float> d_input_;     // Scratch for the next d_output_.
  std::vector<float> transposed_;  // Scratch for a transposed matrix.
  float loss_ = 0.0f;
  // The layer the next Forward must be for; num_layers() once all are done.
  int next_forward_ = 0;
  // The layer the next Backward must be for (once next_forward_ is
  // num_layers()); -1 once all are done.
  int next_backward_;
};

}  // namespace tessel::model

#endif  // TESSEL_MODEL_MLP_H_
