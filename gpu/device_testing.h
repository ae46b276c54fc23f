// What the suites over every compute device share (testonly): a fixture
// parameterized by the device kind ("host" everywhere, "cuda" where a GPU is;
// skipped with the reason otherwise), and the copies a test makes to and from
// the device, each synchronized before it returns.
//
// Example:
//   class MyTest : public gpu::DeviceSuite {};
//   TEST_P(MyTest, Fills) {
//     gpu::DeviceBuffer<float> b = Zeros<float>(16);
//     EXPECT_EQ(Download(b), std::vector<float>(16, 0.f));
//   }
//   INSTANTIATE_TEST_SUITE_P(Devices, MyTest, ::testing::Values("host", "cuda"));
#ifndef TESSEL_GPU_DEVICE_TESTING_H_
#define TESSEL_GPU_DEVICE_TESTING_H_

#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/device.h"
#include "gtest/gtest.h"

namespace tessel::gpu {

class DeviceSuite : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto d = OpenDevice(GetParam());
    if (!d.ok()) GTEST_SKIP() << "no " << GetParam() << " device: " << d.status().message();
    device_ = std::move(*d);
    std::cout << "device: " << device_->description() << "\n";
  }
  // The host device computes products exactly as the CPU reference does.
  bool exact_products() const { return device_->kind() == "host"; }

  template <typename T>
  DeviceBuffer<T> Upload(const std::vector<T>& v) {
    auto b = DeviceBuffer<T>::Create(device_.get(), v.size());
    EXPECT_TRUE(b.ok()) << b.status();
    device_->CopyToDevice(Stream::kCompute, b->data(), v.data(), v.size() * sizeof(T));
    // The copy is asynchronous: `v` may change (or go) once this returns.
    EXPECT_TRUE(device_->SynchronizeStream(Stream::kCompute).ok());
    return std::move(*b);
  }
  template <typename T>
  std::vector<T> Download(const DeviceBuffer<T>& b, Stream s = Stream::kCompute) {
    std::vector<T> v(b.size());
    device_->CopyToHost(s, v.data(), b.data(), v.size() * sizeof(T));
    EXPECT_TRUE(device_->SynchronizeStream(s).ok());
    return v;
  }
  template <typename T>
  DeviceBuffer<T> Zeros(size_t n) {
    auto b = DeviceBuffer<T>::Create(device_.get(), n);
    EXPECT_TRUE(b.ok()) << b.status();
    std::vector<T> z(n);
    device_->CopyToDevice(Stream::kCompute, b->data(), z.data(), n * sizeof(T));
    EXPECT_TRUE(device_->SynchronizeStream(Stream::kCompute).ok());
    return std::move(*b);
  }

  std::unique_ptr<Device> device_;
};

// n floats drawn uniformly from [lo, hi) by a generator seeded with `seed`.
inline std::vector<float> Random(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace tessel::gpu

#endif  // TESSEL_GPU_DEVICE_TESTING_H_
