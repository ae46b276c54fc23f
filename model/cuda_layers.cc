#include "model/cuda_layers.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gpu/cublas.h"
#include "gpu/cuda_device.h"
#include "model/cuda_layer_kernels.h"
#include "runtime/log.h"

namespace tessel::model {
namespace {

using gpu::CublasHandle;
using gpu::CublasLibrary;
using gpu::CublasOperation;
using gpu::CublasStatus;
using gpu::kCublasOpN;
using gpu::kCublasOpT;
using gpu::kCublasSuccess;
using gpu::Stream;

// Why the CUDA layers cannot be had (the same words as the device's own).
absl::Status Unusable(absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("no usable CUDA device: ", why));
}

class CudaLayers : public DeviceLayers {
 public:
  CudaLayers(gpu::CudaDevice* device, CublasLibrary cublas)
      : device_(device), cublas_(std::move(cublas)) {}

  ~CudaLayers() override {
    for (int i = 0; i < gpu::kNumStreams; ++i) {
      if (absl::Status s = device_->SynchronizeStream(static_cast<Stream>(i)); !s.ok()) {
        TESSEL_LOG(WARNING) << "CudaLayers: waiting for stream " << i
                            << " before destroying its cuBLAS handle failed: " << s;
      }
    }
    for (CublasHandle& h : handles_) {
      if (h != nullptr) cublas_.destroy(h);
      h = nullptr;
    }
    (void)cudaGetLastError();
  }

  // One handle per stream, bound to it; whatever was created is destroyed by
  // the destructor when this fails.
  absl::Status CreateHandles() {
    for (int i = 0; i < gpu::kNumStreams; ++i) {
      CublasStatus status = cublas_.create(&handles_[i]);
      if (status != kCublasSuccess) {
        handles_[i] = nullptr;
        return Unusable(absl::StrCat("cublasCreate: ", cublas_.StatusString(status)));
      }
      status = cublas_.set_math_mode(handles_[i], gpu::kCublasDefaultMath);
      if (status == kCublasSuccess) {
        status = cublas_.set_stream(handles_[i], stream(static_cast<Stream>(i)));
      }
      if (status != kCublasSuccess) {
        return Unusable(
            absl::StrCat("cublasSetMathMode/SetStream: ", cublas_.StatusString(status)));
      }
    }
    return absl::OkStatus();
  }

  gpu::Device* device() const override { return device_; }

  // cuBLAS is column-major. A row-major matrix X [r, c] with leading dimension
  // c is, read column-major, X^T [c, r] with the same leading dimension. So
  // each row-major product C = A * B is computed as the column-major product
  // C^T = B^T * A^T, with the operands' transposes chosen below.

  // output [batch, out] = input [batch, in] * weight [out, in]^T + bias.
  // Column-major: output^T [out, batch] = weight [out, in] * input^T [in, batch].
  //   weight's memory read column-major is weight^T [in, out] (ld in): op T
  //     gives weight, m = out, k = in, lda = in;
  //   input's memory read column-major is input^T [in, batch] (ld in): op N,
  //     k = in, n = batch, ldb = in;
  //   C = output's memory, read column-major output^T [out, batch], ldc = out.
  // beta = 1 accumulates onto the bias rows written first (beta = 0 without
  // a bias: cuBLAS does not read C then).
  void Linear(Stream s, int batch, int in, int out, const float* input, const float* weight,
              const float* bias, float* output) override {
    if (!ValidSizes("Linear", batch, in, out)) return;
    if (batch == 0 || out == 0) return;
    if (bias != nullptr) {
      if (!device_->Launched(cuda_kernels::LaunchBiasRows(stream(s), batch, out, bias, output),
                             "Linear bias")) {
        return;
      }
    } else if (in == 0) {
      device_->Fill(s, output, 0.0f, static_cast<size_t>(batch) * static_cast<size_t>(out));
      return;
    }
    if (in == 0) return;  // output = bias
    Gemm(s, kCublasOpT, kCublasOpN, /*m=*/out, /*n=*/batch, /*k=*/in, weight, /*lda=*/in, input,
         /*ldb=*/in, bias != nullptr ? 1.0f : 0.0f, output, /*ldc=*/out, "Linear");
  }

  void Relu(Stream s, float* v, size_t n) override {
    device_->Launched(cuda_kernels::LaunchRelu(stream(s), v, n), "Relu");
  }

  // The per-row losses go to a scratch array from the stream-ordered pool,
  // freed on the stream after the mean is taken.
  void SoftmaxCrossEntropy(Stream s, const float* logits, const int32_t* y, int batch, int classes,
                           float* loss, float* dlogits) override {
    if (batch < 0 || classes < 0) {
      device_->RecordError(absl::InvalidArgumentError(absl::StrCat(
          "SoftmaxCrossEntropy(batch=", batch, ", classes=", classes, "): negative size")));
      return;
    }
    float* row_loss = nullptr;
    if (batch > 0) {
      void* p = nullptr;
      if (!device_->Check(cudaMallocFromPoolAsync(&p, static_cast<size_t>(batch) * sizeof(float),
                                                  device_->pool(), stream(s)),
                          "cudaMallocFromPoolAsync in SoftmaxCrossEntropy")) {
        return;
      }
      row_loss = static_cast<float*>(p);
    }
    device_->Launched(cuda_kernels::LaunchSoftmaxCrossEntropy(stream(s), logits, y, batch, classes,
                                                              row_loss, loss, dlogits),
                      "SoftmaxCrossEntropy");
    if (row_loss != nullptr) {
      device_->Check(cudaFreeAsync(row_loss, stream(s)), "cudaFreeAsync in SoftmaxCrossEntropy");
    }
  }

  void BiasGrad(Stream s, int batch, int out, const float* d_output, float* d_bias) override {
    if (!ValidSizes("BiasGrad", batch, 0, out)) return;
    device_->Launched(cuda_kernels::LaunchBiasGrad(stream(s), batch, out, d_output, d_bias),
                      "BiasGrad");
  }

  // d_weight [out, in] = d_output^T [out, batch] * input [batch, in].
  // Column-major: d_weight^T [in, out] = input^T [in, batch] * d_output [batch, out].
  //   input's memory read column-major is input^T [in, batch] (ld in): op N,
  //     m = in, k = batch, lda = in;
  //   d_output's memory read column-major is d_output^T [out, batch] (ld out):
  //     op T gives d_output [batch, out], k = batch, n = out, ldb = out;
  //   C = d_weight's memory, read column-major d_weight^T [in, out], ldc = in.
  // beta = 0: overwrites, as the CPU kernel does.
  void WeightGrad(Stream s, int batch, int in, int out, const float* d_output, const float* input,
                  float* d_weight) override {
    if (!ValidSizes("WeightGrad", batch, in, out)) return;
    if (in == 0 || out == 0) return;
    if (batch == 0) {  // no rows: the zero matrix (cuBLAS is not asked for k = 0)
      device_->Fill(s, d_weight, 0.0f, static_cast<size_t>(out) * static_cast<size_t>(in));
      return;
    }
    Gemm(s, kCublasOpN, kCublasOpT, /*m=*/in, /*n=*/out, /*k=*/batch, input, /*lda=*/in, d_output,
         /*ldb=*/out, 0.0f, d_weight, /*ldc=*/in, "WeightGrad");
  }

  // d_input [batch, in] = d_output [batch, out] * weight [out, in].
  // Column-major: d_input^T [in, batch] = weight^T [in, out] * d_output^T [out, batch].
  //   weight's memory read column-major is weight^T [in, out] (ld in): op N,
  //     m = in, k = out, lda = in;
  //   d_output's memory read column-major is d_output^T [out, batch] (ld out):
  //     op N, k = out, n = batch, ldb = out;
  //   C = d_input's memory, read column-major d_input^T [in, batch], ldc = in.
  // beta = 0: overwrites, as the CPU kernel does.
  void InputGrad(Stream s, int batch, int in, int out, const float* d_output, const float* weight,
                 float* d_input) override {
    if (!ValidSizes("InputGrad", batch, in, out)) return;
    if (batch == 0 || in == 0) return;
    if (out == 0) {  // an empty sum: zeros
      device_->Fill(s, d_input, 0.0f, static_cast<size_t>(batch) * static_cast<size_t>(in));
      return;
    }
    Gemm(s, kCublasOpN, kCublasOpN, /*m=*/in, /*n=*/batch, /*k=*/out, weight, /*lda=*/in, d_output,
         /*ldb=*/out, 0.0f, d_input, /*ldc=*/in, "InputGrad");
  }

  void ReluMask(Stream s, const float* activation, float* d, size_t n) override {
    device_->Launched(cuda_kernels::LaunchReluMask(stream(s), activation, d, n), "ReluMask");
  }

 private:
  cudaStream_t stream(Stream s) const { return device_->stream(s); }
  CublasHandle handle(Stream s) const { return handles_[static_cast<int>(s)]; }

  // Negative sizes are a caller's bug, recorded like a bad launch.
  bool ValidSizes(const char* op, int batch, int in, int out) {
    if (batch >= 0 && in >= 0 && out >= 0) return true;
    device_->RecordError(absl::InvalidArgumentError(
        absl::StrCat(op, "(batch=", batch, ", in=", in, ", out=", out, "): negative size")));
    return false;
  }

  // C = A' * B' + beta * C, column-major, alpha = 1, on stream s (see the
  // derivations at Linear, WeightGrad and InputGrad).
  void Gemm(Stream s, CublasOperation trans_a, CublasOperation trans_b, int m, int n, int k,
            const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
            const char* op) {
    const float alpha = 1.0f;
    // The handle is this stream's own and already bound to it; setting the
    // stream again costs nothing and keeps the binding local to the call.
    CublasStatus status = cublas_.set_stream(handle(s), stream(s));
    if (status == kCublasSuccess) {
      status = cublas_.sgemm(handle(s), trans_a, trans_b, m, n, k, &alpha, a, lda, b, ldb, &beta, c,
                             ldc);
    }
    if (status != kCublasSuccess) {
      (void)cudaGetLastError();
      device_->RecordError(absl::InternalError(absl::StrCat(
          "CUDA: cuBLAS ", cublas_.StatusString(status), " in cublasSgemm (", op, ")")));
    }
  }

  gpu::CudaDevice* const device_;
  const CublasLibrary cublas_;
  std::array<CublasHandle, gpu::kNumStreams> handles_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceLayers>> OpenCudaLayers(gpu::Device* device) {
  gpu::CudaDevice* cuda = gpu::CudaDevice::From(device);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError("OpenCudaLayers: the device is not the CUDA device");
  }
  absl::StatusOr<CublasLibrary> cublas = CublasLibrary::Load();
  if (!cublas.ok()) return Unusable(cublas.status().message());
  auto layers = std::make_unique<CudaLayers>(cuda, *std::move(cublas));
  TESSEL_RETURN_IF_ERROR(layers->CreateHandles());  // ~CudaLayers cleans up
  return std::unique_ptr<DeviceLayers>(std::move(layers));
}

// OpenDeviceLayers reaches the CUDA layers through this registration, made
// when the binary that links //model:cuda_layers (alwayslink) starts.
[[maybe_unused]] static const bool registered = RegisterCudaLayers(&OpenCudaLayers);

}  // namespace tessel::model
