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

#ifndef TESSEL_MODEL_MLP_H_
#define TESSEL_MODEL_MLP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
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

  // Writes num_params() floats: torch.nn.Linear's default initialisation,
  // U(-1/sqrt(in), 1/sqrt(in)) for both weight and bias of each layer, drawn
  // from this library's own PRNG (same seed, same bits everywhere).
  void Init(float* params, uint64_t seed) const;

  // Forward and backward over a batch. x is row-major [batch, num_inputs()],
  // y holds batch labels in [0, num_classes()), batch >= 1. Overwrites all
  // num_params() entries of grads with d(loss)/d(params) and returns the mean
  // loss. grads must not overlap params or x.
  float LossAndGrad(const float* params, const float* x, const int32_t* y,
                    int batch, float* grads) const;

  // As above, and calls on_grad_ready(i) on the calling thread as soon as the
  // gradient of tensors()[i] is final: once per tensor, in reverse order
  // (last layer's bias first, fc0.weight last), so a caller can start sending
  // gradients while backward continues. During and after the call,
  // LossAndGrad no longer writes that tensor's range of grads (other ranges
  // are still being written). The callback must not write to grads, and
  // should return quickly: backward waits for it.
  float LossAndGrad(
      const float* params, const float* x, const int32_t* y, int batch,
      float* grads,
      const std::function<void(size_t tensor_index)>& on_grad_ready) const;

  // The mean loss alone (forward only). Same value, bit for bit, as the one
  // LossAndGrad returns.
  float Loss(const float* params, const float* x, const int32_t* y,
             int batch) const;

  // Writes the predicted class (argmax of the logits; ties to the lowest
  // class) of each of the batch rows of x to predictions.
  void Predict(const float* params, const float* x, int batch,
               int32_t* predictions) const;

  // Fraction of rows of data whose prediction equals the label; 0 for an
  // empty data set. data must have num_inputs() features and num_classes()
  // classes.
  double Accuracy(const float* params, const Dataset& data) const;

 private:
  struct Workspace;

  // Fills ws->activations for a batch; the last one holds the logits.
  void Forward(const float* params, const float* x, int batch,
               Workspace* ws) const;

  std::vector<int> sizes_;
  std::vector<TensorInfo> tensors_;
  size_t num_params_ = 0;
};

}  // namespace tessel::model

#endif  // TESSEL_MODEL_MLP_H_
