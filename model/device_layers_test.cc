// The demo MLP's layers on every device (device_layers.h): "host" everywhere,
// "cuda" where a GPU is (skipped with the reason otherwise), against
// model/layer_kernels.h: the host layers bit for bit, the CUDA layers within
// a stated tolerance where cuBLAS sums in its own order (matrix products).
#include "model/device_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/device.h"
#include "gpu/device_testing.h"
#include "gtest/gtest.h"
#include "model/layer_kernels.h"

namespace tessel::model {
namespace {

using gpu::Device;
using gpu::DeviceBuffer;
using gpu::OpenDevice;
using gpu::Stream;

class DeviceLayersTest : public gpu::DeviceSuite {
 protected:
  void SetUp() override {
    DeviceSuite::SetUp();
    if (IsSkipped()) return;
    auto layers = OpenDeviceLayers(device_.get());
    if (!layers.ok() && layers.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << "no layers on " << GetParam() << ": " << layers.status().message();
    }
    ASSERT_TRUE(layers.ok()) << layers.status();
    layers_ = std::move(*layers);
    EXPECT_EQ(layers_->device(), device_.get());
  }
  void TearDown() override { layers_.reset(); }  // before the device

  std::unique_ptr<DeviceLayers> layers_;
};

using gpu::Random;

// The layers run on the device's streams, in order with its events: a copy
// on kToHost that waits for an event recorded after slow layer work on
// kCompute sees that work's result; without the wait the streams are free to
// run in any order, so only the ordered case is asserted.
TEST_P(DeviceLayersTest, EventsOrderStreams) {
  const int n = 256;
  std::vector<float> x = Random(n * n, 2), w = Random(n * n, 3);
  auto dx = Upload(x);
  auto dw = Upload(w);
  auto dy = Zeros<float>(n * n);
  ASSERT_TRUE(device_->SynchronizeStream(Stream::kCompute).ok());
  auto done = device_->NewEvent();
  std::vector<float> out(n * n, -1.0f);
  ASSERT_TRUE(device_->PinHost(out.data(), out.size() * sizeof(float)).ok());
  for (int r = 0; r < 4; ++r) {
    layers_->Linear(Stream::kCompute, n, n, n, dx.data(), dw.data(), nullptr, dy.data());
  }
  device_->Record(Stream::kCompute, done.get());
  device_->Wait(Stream::kToHost, done.get());
  device_->CopyToHost(Stream::kToHost, out.data(), dy.data(), out.size() * sizeof(float));
  ASSERT_TRUE(device_->SynchronizeStream(Stream::kToHost).ok());
  std::vector<float> expect(n * n), scratch;
  kernels::Linear(n, n, n, x.data(), w.data(), nullptr, expect.data(), &scratch);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], expect[i], 1e-4f * (1 + std::fabs(expect[i]))) << i;
  }
  device_->UnpinHost(out.data());

  // An event never recorded is reached; elapsed time between two recorded
  // events is measured.
  auto never = device_->NewEvent();
  EXPECT_TRUE(device_->Synchronize(never.get()).ok());
  auto start = device_->NewEvent();
  device_->Record(Stream::kCompute, start.get());
  layers_->Linear(Stream::kCompute, n, n, n, dx.data(), dw.data(), nullptr, dy.data());
  device_->Record(Stream::kCompute, done.get());
  ASSERT_TRUE(device_->Synchronize(done.get()).ok());
  auto ms = device_->ElapsedMs(start.get(), done.get());
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.0);
}

// The MLP's kernels on a layer of odd sizes, forward and backward, against
// model/layer_kernels.h.
TEST_P(DeviceLayersTest, LayerKernelsMatchTheCpu) {
  const int batch = 33, in = 129, out = 65, classes = out;
  std::vector<float> x = Random(batch * in, 11), w = Random(out * in, 12), b = Random(out, 13);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 7) % classes;
  auto dx = Upload(x), dw = Upload(w), db = Upload(b);
  auto dy = Upload(y);
  auto dout = Zeros<float>(batch * out), dlogits = Zeros<float>(batch * out);
  auto dloss = Zeros<float>(1), dbias = Zeros<float>(out), dweight = Zeros<float>(out * in);
  auto dinput = Zeros<float>(batch * in);

  layers_->Linear(Stream::kCompute, batch, in, out, dx.data(), dw.data(), db.data(), dout.data());
  std::vector<float> linear = Download(dout);
  layers_->Relu(Stream::kCompute, dout.data(), batch * out);
  std::vector<float> relu = Download(dout);
  layers_->SoftmaxCrossEntropy(Stream::kCompute, dout.data(), dy.data(), batch, classes,
                               dloss.data(), dlogits.data());
  layers_->BiasGrad(Stream::kCompute, batch, out, dlogits.data(), dbias.data());
  layers_->WeightGrad(Stream::kCompute, batch, in, out, dlogits.data(), dx.data(), dweight.data());
  layers_->InputGrad(Stream::kCompute, batch, in, out, dlogits.data(), dw.data(), dinput.data());
  layers_->ReluMask(Stream::kCompute, dx.data(), dinput.data(), batch * in);

  std::vector<float> e_out(batch * out), scratch, e_dlogits(batch * out), e_bias(out),
      e_weight(out * in), e_input(batch * in);
  kernels::Linear(batch, in, out, x.data(), w.data(), b.data(), e_out.data(), &scratch);
  std::vector<float> e_linear = e_out;
  kernels::Relu(e_out.data(), e_out.size());
  const float e_loss =
      kernels::SoftmaxCrossEntropy(e_out.data(), y.data(), batch, classes, e_dlogits.data());
  kernels::BiasGrad(batch, out, e_dlogits.data(), e_bias.data());
  kernels::WeightGrad(batch, in, out, e_dlogits.data(), x.data(), e_weight.data(), &scratch);
  kernels::InputGrad(batch, in, out, e_dlogits.data(), w.data(), e_input.data());
  kernels::ReluMask(x.data(), e_input.data(), e_input.size());

  // Products: exact on host; cuBLAS sums in its own order, so within a
  // relative 1e-5 of the largest term's scale.
  auto check = [&](const char* what, const std::vector<float>& got,
                   const std::vector<float>& expect, float scale) {
    ASSERT_EQ(got.size(), expect.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - expect[i])) / scale);
    }
    std::cout << what << ": worst difference " << worst << " (relative to " << scale << ")\n";
    if (exact_products()) {
      EXPECT_EQ(got, expect) << what;
    } else {
      EXPECT_LE(worst, 1e-5) << what;
    }
  };
  check("linear", linear, e_linear, in);
  check("relu", relu, e_out, in);
  std::vector<float> loss = Download(dloss);
  check("loss", loss, {e_loss}, 1);
  check("dlogits", Download(dlogits), e_dlogits, 1.0f / batch);
  check("bias grad", Download(dbias), e_bias, 1);
  check("weight grad", Download(dweight), e_weight, 1);
  check("input grad", Download(dinput), e_input, 1);
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceLayersTest, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(OpenDeviceLayers, NoDeviceIsInvalidArgument) {
  auto layers = OpenDeviceLayers(nullptr);
  ASSERT_FALSE(layers.ok());
  EXPECT_EQ(layers.status().code(), absl::StatusCode::kInvalidArgument) << layers.status();
}

// Where the CUDA device opens, so do its layers (this binary links
// //model:cuda_layers), or they say why (no cuBLAS).
TEST(OpenDeviceLayers, TheCudaDeviceHasLayersOrSaysWhy) {
  auto device = OpenDevice("cuda");
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  auto layers = OpenDeviceLayers(device->get());
  if (!layers.ok()) {
    EXPECT_EQ(layers.status().code(), absl::StatusCode::kFailedPrecondition) << layers.status();
  }
}

}  // namespace
}  // namespace tessel::model
