// DeviceMlp against Mlp::LossAndGrad: bit for bit on the host device, within
// cuBLAS's summation-order tolerance on CUDA (skipped without a GPU).
#include "model/device_mlp.h"

#include <cmath>

#include "gtest/gtest.h"
#include "model/dataset.h"

namespace tessel::model {
namespace {

class DeviceMlpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceMlpTest, LossAndGradientsMatchTheCpuModel) {
  auto device = gpu::OpenDevice(GetParam());
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  Mlp model({20, 64, 48, 10});
  const int batch = 17;
  Dataset data = MakeClusters(batch, 20, 10, /*seed=*/3);
  std::vector<float> params(model.num_params()), grads(model.num_params());
  model.Init(params.data(), 7);
  const float loss =
      model.LossAndGrad(params.data(), data.x.data(), data.y.data(), batch, grads.data());

  gpu::Device* d = device->get();
  auto mlp = DeviceMlp::Create(model, d, batch);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  auto dparams = gpu::DeviceBuffer<float>::Create(d, params.size());
  auto dgrads = gpu::DeviceBuffer<float>::Create(d, params.size());
  ASSERT_TRUE(dparams.ok() && dgrads.ok());
  d->CopyToDevice(gpu::Stream::kCompute, dparams->data(), params.data(), params.size() * 4);
  ASSERT_TRUE((*mlp)->SetBatch(data.x.data(), data.y.data()).ok());
  for (int l = 0; l < model.num_layers(); ++l) {
    (*mlp)->Forward(l, dparams->data() + model.LayerRange(l).first);
  }
  for (int l = model.num_layers(); l-- > 0;) {
    const size_t off = model.LayerRange(l).first;
    (*mlp)->Backward(l, dparams->data() + off, dgrads->data() + off);
  }
  auto device_loss = (*mlp)->Loss();
  ASSERT_TRUE(device_loss.ok()) << device_loss.status();
  std::vector<float> device_grads(grads.size());
  d->CopyToHost(gpu::Stream::kCompute, device_grads.data(), dgrads->data(), grads.size() * 4);
  ASSERT_TRUE(d->SynchronizeStream(gpu::Stream::kCompute).ok());
  if (d->kind() == "host") {
    EXPECT_EQ(*device_loss, loss);
    EXPECT_EQ(device_grads, grads);
  } else {
    EXPECT_NEAR(*device_loss, loss, 1e-5 * std::fabs(loss));
    double worst = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(device_grads[i] - grads[i])));
    }
    std::cout << "worst gradient difference " << worst << "\n";
    EXPECT_LE(worst, 1e-5);
  }

  // A label out of range is refused before anything is enqueued.
  std::vector<int32_t> bad = data.y;
  bad[3] = 10;
  absl::Status s = (*mlp)->SetBatch(data.x.data(), bad.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceMlpTest, ::testing::Values("host", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessel::model
