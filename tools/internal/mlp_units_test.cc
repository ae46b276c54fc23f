// The MLP's per-unit recipe on the CPU and on the "host" device compute the
// same loss and gradients, bit for bit, unit by unit.
#include "tools/internal/mlp_units.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "model/device_layers.h"

namespace tessel {
namespace {

TEST(MlpUnitsTest, TheHostDeviceComputesWhatTheCpuDoes) {
  MlpJobConfig c;
  c.layers = {8, 16, 12, 4};
  c.batch = 6;
  c.samples = 64;
  const MlpJob job(c);
  const model::Mlp& m = job.model();
  std::vector<float> params(m.num_params());
  job.Init(params.data());

  auto device = gpu::OpenDevice("host");
  ASSERT_TRUE(device.ok()) << device.status();
  auto layers = model::OpenDeviceLayers(device->get());
  ASSERT_TRUE(layers.ok()) << layers.status();
  auto mlp = model::DeviceMlp::Create(m, std::move(*layers), c.batch);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  size_t widest = 0;
  for (int l = 0; l < m.num_layers(); ++l) widest = std::max(widest, m.LayerRange(l).second);
  auto unit_params = gpu::DeviceBuffer<float>::Create(device->get(), widest);
  auto unit_grads = gpu::DeviceBuffer<float>::Create(device->get(), widest);
  ASSERT_TRUE(unit_params.ok() && unit_grads.ok());

  const int64_t step = 3;
  MlpUnits cpu(job, step, /*rank=*/1, /*world=*/2);
  DeviceMlpUnits on_device(mlp->get(), device->get(), unit_params->data(), unit_grads->data());
  ASSERT_TRUE(on_device.SetBatch(job.Batch(step, 1, 2)).ok());

  for (int u = 0; u < m.num_layers(); ++u) {
    const float* p = params.data() + m.LayerRange(u).first;
    cpu.Forward(u, p);
    on_device.Forward(u, p);
  }
  EXPECT_EQ(cpu.Loss(), on_device.Loss());
  std::vector<float> from_cpu(m.num_params()), from_device(m.num_params());
  for (int u = m.num_layers() - 1; u >= 0; --u) {
    const size_t offset = m.LayerRange(u).first;
    cpu.Backward(u, params.data() + offset, from_cpu.data() + offset);
    on_device.Backward(u, params.data() + offset, from_device.data() + offset);
  }
  EXPECT_EQ(from_cpu, from_device);
  EXPECT_TRUE(on_device.status().ok()) << on_device.status();
}

}  // namespace
}  // namespace tessel
