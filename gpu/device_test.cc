// Runs everywhere: without a GPU it proves the CUDA code is linked and that
// detection fails cleanly into the CPU path; with a GPU it checks the device
// kernels against the CPU reference bit for bit.
#include "gpu/device.h"

#include <random>
#include <vector>

#include "gpu/optimizer_kernels.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(DeviceTest, DetectionNeverCrashesAndExplainsItself) {
  CudaInfo info = DetectCuda();
  EXPECT_GT(info.runtime_version, 0) << "libcudart is linked";
  EXPECT_FALSE(info.reason.empty());
  if (!info.available) {
    std::vector<float> p(4), g(4);
    OptimizerParams opt;
    absl::Status s = ApplyUpdateOnDevice(opt, 1, p.data(), g.data(), nullptr, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("CPU"), std::string::npos) << s;
  }
}

TEST(DeviceTest, RunTimeDetectionAgreesWithTheLinkedRuntime) {
  // DetectCuda loads libcudart with dlopen; here the runtime is also linked
  // (the kernels need it), and both must see the same runtime and devices.
  int linked_runtime = 0;
  const int linked_devices = TesselCudaDeviceCount(&linked_runtime);
  CudaInfo info = DetectCuda();
  EXPECT_EQ(info.runtime_version, linked_runtime) << info.reason;
  EXPECT_EQ(info.available, linked_devices > 0) << info.reason;
  if (linked_devices > 0) {
    EXPECT_EQ(info.devices, linked_devices);
  }
}

TEST(DeviceTest, DeviceKernelsMatchCpuWhenAGpuIsPresent) {
  if (!DetectCuda().available) GTEST_SKIP() << "no CUDA device: " << DetectCuda().reason;
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  const size_t n = 10007;
  for (auto kind :
       {OptimizerParams::Kind::kSgd, OptimizerParams::Kind::kAdam, OptimizerParams::Kind::kAdamW}) {
    OptimizerParams opt;
    opt.kind = kind;
    opt.lr = 0.01f;
    opt.weight_decay = 0.01f;
    if (kind == OptimizerParams::Kind::kSgd) opt.momentum = 0.9f;
    std::vector<float> p(n), g(n);
    for (size_t i = 0; i < n; ++i) p[i] = d(rng), g[i] = d(rng);
    std::vector<float> pc = p, s0c(n), s1c(n), s0g(n), s1g(n);
    float* sc[2] = {s0c.data(), s1c.data()};
    float* sg[2] = {s0g.data(), s1g.data()};
    for (int step = 1; step <= 3; ++step) {
      ApplyUpdate(opt, step, pc.data(), g.data(), sc, n);
      ASSERT_TRUE(ApplyUpdateOnDevice(opt, step, p.data(), g.data(), sg, n).ok());
    }
    EXPECT_EQ(p, pc);
  }
}

}  // namespace
}  // namespace tessel
