#include "model/host_layers.h"

#include <array>
#include <vector>

#include "model/layer_kernels.h"
#include "runtime/log.h"

namespace tessel::model {
namespace {

using gpu::Stream;

class HostLayers : public DeviceLayers {
 public:
  explicit HostLayers(gpu::HostDevice* device) : device_(device) {}
  ~HostLayers() override {
    // The tasks enqueued use scratch_.
    for (int i = 0; i < gpu::kNumStreams; ++i) {
      if (absl::Status s = device_->SynchronizeStream(static_cast<Stream>(i)); !s.ok()) {
        TESSEL_LOG(WARNING) << "HostLayers: waiting for stream " << i
                            << " before freeing its scratch buffers failed: " << s;
      }
    }
  }

  gpu::Device* device() const override { return device_; }

  void Linear(Stream s, int batch, int in, int out, const float* input, const float* weight,
              const float* bias, float* output) override {
    std::vector<float>* scratch = Scratch(s);
    device_->Enqueue(
        s, [=] { kernels::Linear(batch, in, out, input, weight, bias, output, scratch); });
  }
  void Relu(Stream s, float* v, size_t n) override {
    device_->Enqueue(s, [=] { kernels::Relu(v, n); });
  }
  void SoftmaxCrossEntropy(Stream s, const float* logits, const int32_t* y, int batch, int classes,
                           float* loss, float* dlogits) override {
    device_->Enqueue(
        s, [=] { *loss = kernels::SoftmaxCrossEntropy(logits, y, batch, classes, dlogits); });
  }
  void BiasGrad(Stream s, int batch, int out, const float* d_output, float* d_bias) override {
    device_->Enqueue(s, [=] { kernels::BiasGrad(batch, out, d_output, d_bias); });
  }
  void WeightGrad(Stream s, int batch, int in, int out, const float* d_output, const float* input,
                  float* d_weight) override {
    std::vector<float>* scratch = Scratch(s);
    device_->Enqueue(
        s, [=] { kernels::WeightGrad(batch, in, out, d_output, input, d_weight, scratch); });
  }
  void InputGrad(Stream s, int batch, int in, int out, const float* d_output, const float* weight,
                 float* d_input) override {
    device_->Enqueue(s, [=] { kernels::InputGrad(batch, in, out, d_output, weight, d_input); });
  }
  void ReluMask(Stream s, const float* activation, float* d, size_t n) override {
    device_->Enqueue(s, [=] { kernels::ReluMask(activation, d, n); });
  }

 private:
  std::vector<float>* Scratch(Stream s) { return &scratch_[static_cast<int>(s)]; }

  gpu::HostDevice* const device_;
  // scratch_[s]: touched only by the tasks on stream s (its one thread).
  std::array<std::vector<float>, gpu::kNumStreams> scratch_;
};

}  // namespace

std::unique_ptr<DeviceLayers> NewHostLayers(gpu::HostDevice* device) {
  return std::make_unique<HostLayers>(device);
}

}  // namespace tessel::model
