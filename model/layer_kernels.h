// Per-layer kernels of a fully connected network (forward, ReLU, softmax
// cross-entropy, and the three backward products), as separate calls so that
// a caller can split a layer over tensor-parallel ranks and combine partial
// results itself.
//
// Contract: these are the kernels Mlp (model/mlp.cc) itself runs, compiled
// with -ffp-contract=off, so composing them the way Mlp does gives Mlp's
// results bit for bit.
// Every sum over a reduction index runs in ascending order of that index;
// vectorisation only spreads independent outputs across lanes.
//
// Matrices are row-major and contiguous. A layer maps input [batch, in] to
// output [batch, out] with weight [out, in] (torch.nn.Linear's layout) and
// bias [out].
//
// Example (one layer forward and backward):
//   std::vector<float> out(batch * n_out), scratch;
//   Linear(batch, n_in, n_out, x, w, b, out.data(), &scratch);
//   Relu(out.data(), out.size());
//   ...
//   BiasGrad(batch, n_out, d_out, d_b);
//   WeightGrad(batch, n_in, n_out, d_out, x, d_w, &scratch);
//   InputGrad(batch, n_in, n_out, d_out, w, d_x);
//   ReluMask(x_prev_activation, d_x, batch * n_in);
//
// Thread safety: pure functions; scratch vectors belong to the caller.
#ifndef TESSEL_MODEL_LAYER_KERNELS_H_
#define TESSEL_MODEL_LAYER_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessel::model::kernels {

// output [batch, out] = bias (broadcast over rows; zeros when bias is null)
// + input [batch, in] * weight^T, each output accumulating its `in` products in
// ascending order after the bias. `scratch` holds the transposed weight.
void Linear(int batch, int in, int out, const float* input, const float* weight, const float* bias,
            float* output, std::vector<float>* scratch);

// v[i] = max(v[i], 0).
void Relu(float* v, size_t n);

// Mean softmax cross-entropy of logits [batch, classes] against labels y (each
// in [0, classes), checked); writes d(mean loss)/d(logits) to dlogits when it
// is not null.
float SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch, int classes,
                          float* dlogits);

// d_bias [out] = sum over rows (in order) of d_output [batch, out].
void BiasGrad(int batch, int out, const float* d_output, float* d_bias);

// d_weight [out, in] = d_output^T [out, batch] * input [batch, in]
// (overwrites). `scratch` holds the transposed d_output.
void WeightGrad(int batch, int in, int out, const float* d_output, const float* input,
                float* d_weight, std::vector<float>* scratch);

// d_input [batch, in] = d_output [batch, out] * weight [out, in] (overwrites;
// no ReLU mask).
void InputGrad(int batch, int in, int out, const float* d_output, const float* weight,
               float* d_input);

// d[i] = 0 where !(activation[i] > 0): back through the ReLU that produced
// `activation`.
void ReluMask(const float* activation, float* d, size_t n);

}  // namespace tessel::model::kernels

#endif  // TESSEL_MODEL_LAYER_KERNELS_H_
