// Launchers of the demo MLP's elementwise layer kernels on a CUDA device
// (model/cuda_layer_kernels.cu, nvcc-compiled into //model:cuda_layer_kernels):
// the parts of model/layer_kernels.h that are not matrix products (those are
// cuBLAS's, model/cuda_layers.cc). Internal to //model: the CUDA layers are
// their only caller.
//
// The header is plain C++ (gpu/kernels.h's conventions): a stream is a
// cudaStream_t passed as `void*`, each launcher returns the cudaError_t of
// enqueueing its work as an int (0 == cudaSuccess), pointers are device
// pointers, matrices row-major, and work of size 0 enqueues nothing. Built
// with -fmad=false: Relu, ReluMask, the bias rows and BiasGrad give the CPU's
// bits; expf/logf (softmax) are within 2 ulp of the CPU's, not equal.
//
// Example (cuda_layers.cc):
//   const int e = cuda_kernels::LaunchRelu(stream, v, n);
//   if (e != 0) ...  // record cudaGetErrorString(static_cast<cudaError_t>(e))
#ifndef TESSEL_MODEL_CUDA_LAYER_KERNELS_H_
#define TESSEL_MODEL_CUDA_LAYER_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace tessel::model::cuda_kernels {

// output[r, j] = bias[j] for r < batch, j < out (the start of Linear, before
// the cuBLAS product accumulates onto it).
int LaunchBiasRows(void* stream, int batch, int out, const float* bias, float* output);

// v[i] = v[i] < 0 ? 0 : v[i] (std::max(v, 0.0f): NaN and -0 are kept).
int LaunchRelu(void* stream, float* v, size_t n);

// d[i] = 0 where !(activation[i] > 0).
int LaunchReluMask(void* stream, const float* activation, float* d, size_t n);

// Softmax cross-entropy of logits [batch, classes] against labels y [batch],
// model/layer_kernels.cc's arithmetic: per row the max, the sum of
// exp(z - max) in ascending class order, loss = log(sum) - (z[label] - max)
// into row_loss[row] (device scratch of `batch` floats), and, when dlogits is
// not null, dlogits = (exp(z - max) / sum - onehot) / batch. Then *loss =
// float(sum of the row losses in row order, in double, / batch). A label
// outside [0, classes) gives a NaN loss for its row instead of a fault.
int LaunchSoftmaxCrossEntropy(void* stream, const float* logits, const int32_t* y, int batch,
                              int classes, float* row_loss, float* loss, float* dlogits);

// d_bias[j] = sum over r < batch of d_output[r, j], summed from 0.0f in
// ascending r (model/layer_kernels.cc's order: bit for bit).
int LaunchBiasGrad(void* stream, int batch, int out, const float* d_output, float* d_bias);

}  // namespace tessel::model::cuda_kernels

#endif  // TESSEL_MODEL_CUDA_LAYER_KERNELS_H_
