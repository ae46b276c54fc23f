// One suite over every device (device.h): "host" everywhere, "cuda" where a
// GPU is (skipped with the reason otherwise). Each kernel is checked against
// the CPU reference it stands for: the host device bit for bit, the CUDA
// device bit for bit where the arithmetic is elementwise (casts, copies,
// top-k) and within a few ulps for the optimizers (-fmad=false and IEEE
// division and square root: measured 0). The model's layers on a device:
// model/device_layers_test.cc.
#include "gpu/device.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/optimizer.h"
#include "core/precision.h"
#include "core/topk.h"
#include "gpu/cuda_device.h"
#include "gpu/device_testing.h"
#include "gpu/host_device.h"
#include "gtest/gtest.h"

namespace tessel::gpu {
namespace {

class DeviceTest : public DeviceSuite {};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Units in the last place between two finite floats of the same sign.
int64_t Ulps(float a, float b) {
  if (a == b) return 0;
  return std::llabs(static_cast<int64_t>(Bits(a)) - static_cast<int64_t>(Bits(b)));
}

TEST_P(DeviceTest, CopiesAndFill) {
  std::vector<float> host = Random(1000, 1);
  auto a = Upload(host);
  auto b = DeviceBuffer<float>::Create(device_.get(), host.size());
  ASSERT_TRUE(b.ok());
  device_->CopyOnDevice(Stream::kCompute, b->data(), a.data(), host.size() * sizeof(float));
  EXPECT_EQ(Download(*b), host);
  device_->Fill(Stream::kCompute, a.data(), 2.5f, 10);
  std::vector<float> filled = Download(a);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(filled[i], 2.5f);
  EXPECT_EQ(filled[10], host[10]);
}

// A pinned host buffer that starts and ends inside a page (as the worker's
// heap buffers do): PinHost registers its whole pages only, and copies of
// the whole buffer, of a range inside it and of ranges that cross its edges
// into pageable memory all arrive. CUDA refuses one copy that spans pinned
// and pageable memory ("invalid argument"); the device splits such copies.
TEST_P(DeviceTest, CopiesAcrossPinnedAndPageableMemory) {
  constexpr size_t kPage = 4096, kFloats = 5 * kPage / sizeof(float);
  std::vector<float> backing(kFloats + 3 * kPage / sizeof(float));
  // 100 bytes into a page, ending mid-page: head and tail pages stay pageable.
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(backing.data()) + kPage - 1) / kPage * kPage;
  float* host = reinterpret_cast<float*>(aligned + 100);
  const size_t n = kFloats - 64;
  const std::vector<float> values = Random(n, 7);
  std::copy(values.begin(), values.end(), host);
  ASSERT_TRUE(device_->PinHost(host, n * sizeof(float)).ok());
  auto d = DeviceBuffer<float>::Create(device_.get(), n);
  ASSERT_TRUE(d.ok()) << d.status();
  device_->CopyToDevice(Stream::kToDevice, d->data(), host, n * sizeof(float));
  ASSERT_TRUE(device_->SynchronizeStream(Stream::kToDevice).ok());
  EXPECT_EQ(Download(*d), values);
  // Ranges (in floats): all; one inside the pinned pages; the head only;
  // the tail only; across both edges.
  const std::pair<size_t, size_t> ranges[] = {
      {0, n}, {kPage / 4, kPage / 2}, {0, 10}, {n - 10, 10}, {5, n - 20}};
  for (const auto& [at, count] : ranges) {
    std::fill(host, host + n, -1.0f);
    device_->CopyToHost(Stream::kToHost, host + at, d->data() + at, count * sizeof(float));
    ASSERT_TRUE(device_->SynchronizeStream(Stream::kToHost).ok()) << at << "+" << count;
    for (size_t i = 0; i < n; ++i) {
      const bool inside = i >= at && i < at + count;
      ASSERT_EQ(host[i], inside ? values[i] : -1.0f)
          << "range " << at << "+" << count << " at " << i;
    }
  }
  device_->UnpinHost(host);
}

TEST_P(DeviceTest, ZeroSizedWorkIsFine) {
  auto empty = DeviceBuffer<float>::Create(device_.get(), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  device_->Fill(Stream::kCompute, nullptr, 1.0f, 0);
  device_->Pack(Stream::kCompute, {}, nullptr);
  EXPECT_TRUE(device_->SynchronizeStream(Stream::kCompute).ok());
}

TEST_P(DeviceTest, TooLargeAllocationIsResourceExhausted) {
  auto b = device_->Alloc(size_t{1} << 52);  // 4 PiB
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
}

// A copy on kToHost that waits for an event recorded after slow work on
// kCompute sees that work's result; without the wait the streams are free to
// run in any order, so only the ordered case is asserted. (The same with the
// model's layers as the work: model/device_layers_test.cc.)
TEST_P(DeviceTest, EventsOrderStreams) {
  const size_t n = size_t{1} << 22;  // 16 MiB per fill
  auto dy = Zeros<float>(n);
  auto done = device_->NewEvent();
  std::vector<float> out(n, -1.0f);
  ASSERT_TRUE(device_->PinHost(out.data(), out.size() * sizeof(float)).ok());
  for (int r = 1; r <= 4; ++r) device_->Fill(Stream::kCompute, dy.data(), static_cast<float>(r), n);
  device_->Record(Stream::kCompute, done.get());
  device_->Wait(Stream::kToHost, done.get());
  device_->CopyToHost(Stream::kToHost, out.data(), dy.data(), out.size() * sizeof(float));
  ASSERT_TRUE(device_->SynchronizeStream(Stream::kToHost).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 4.0f) << i;
  device_->UnpinHost(out.data());

  // An event never recorded is reached; elapsed time between two recorded
  // events is measured.
  auto never = device_->NewEvent();
  EXPECT_TRUE(device_->Synchronize(never.get()).ok());
  auto start = device_->NewEvent();
  device_->Record(Stream::kCompute, start.get());
  device_->Fill(Stream::kCompute, dy.data(), 5.0f, n);
  device_->Record(Stream::kCompute, done.get());
  ASSERT_TRUE(device_->Synchronize(done.get()).ok());
  auto ms = device_->ElapsedMs(start.get(), done.get());
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.0);
}

// Every fp16 and bf16 bit pattern widens to the CPU's float; floats chosen
// to hit every rounding case (ties, subnormals, overflow, NaN, inf) narrow
// to the CPU's bits.
TEST_P(DeviceTest, WireCastsMatchTheCpuBitForBit) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> values = Random(100000, 4, -70000, 70000);
  for (float f : Random(20000, 5, -1e-4f, 1e-4f)) values.push_back(f);    // fp16 subnormals
  for (float f : Random(20000, 6, -1e-38f, 1e-38f)) values.push_back(f);  // bf16 subnormals
  for (int i = 0; i < 65536; ++i) {  // exact midpoints between neighbouring halves
    values.push_back(F16ToFloat(static_cast<uint16_t>(i)) * (1 + 1.0f / 4096));
    uint32_t mid = (static_cast<uint32_t>(i) << 16) | 0x8000u;
    float f;
    std::memcpy(&f, &mid, 4);
    values.push_back(f);
  }
  for (float f :
       {0.0f, -0.0f, 65504.0f, 65520.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()}) {
    values.push_back(f);
  }
  auto dall = Upload(all);
  auto dvalues = Upload(values);
  for (HalfType t : {HalfType::kF16, HalfType::kBF16}) {
    SCOPED_TRACE(t == HalfType::kF16 ? "fp16" : "bf16");
    auto wide = Zeros<float>(all.size());
    device_->HalfToFloat(Stream::kCompute, t, dall.data(), wide.data(), all.size());
    std::vector<float> got = Download(wide), expect(all.size());
    tessel::HalfToFloat(t, all.data(), expect.data(), all.size());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(expect[i])) << i;

    auto narrow = Zeros<uint16_t>(values.size());
    device_->FloatToHalf(Stream::kCompute, t, dvalues.data(), narrow.data(), values.size());
    std::vector<uint16_t> got_half = Download(narrow), expect_half(values.size());
    tessel::FloatToHalf(t, values.data(), expect_half.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(got_half[i], expect_half[i]) << "value " << values[i] << " at " << i;
    }
  }
}

TEST_P(DeviceTest, PackAndUnpack) {
  std::vector<float> a = Random(7, 7), b = Random(1, 8), c = Random(4096, 9);
  auto da = Upload(a), db = Upload(b), dc = Upload(c);
  std::vector<Segment> segments = {
      {da.data(), a.size()}, {db.data(), 0}, {db.data(), 1}, {dc.data(), c.size()}};
  auto bucket = Zeros<float>(a.size() + b.size() + c.size());
  device_->Pack(Stream::kCompute, segments, bucket.data());
  std::vector<float> packed = Download(bucket), expect = a;
  expect.insert(expect.end(), b.begin(), b.end());
  expect.insert(expect.end(), c.begin(), c.end());
  EXPECT_EQ(packed, expect);

  std::vector<float> reversed(expect.rbegin(), expect.rend());
  auto src = Upload(reversed);
  device_->Unpack(Stream::kCompute, src.data(), segments);
  std::vector<float> ua = Download(da), ub = Download(db), uc = Download(dc);
  EXPECT_EQ(ua, std::vector<float>(reversed.begin(), reversed.begin() + 7));
  EXPECT_EQ(ub[0], reversed[7]);
  EXPECT_EQ(uc, std::vector<float>(reversed.begin() + 8, reversed.end()));
}

struct NamedOptimizer {
  const char* name;
  OptimizerParams p;
};

std::vector<NamedOptimizer> Optimizers() {
  using K = OptimizerParams::Kind;
  std::vector<NamedOptimizer> out;
  OptimizerParams p;
  p.kind = K::kSgd;
  p.lr = 0.1f;
  out.push_back({"sgd", p});
  p.momentum = 0.9f;
  p.nesterov = true;
  p.weight_decay = 1e-2f;
  out.push_back({"sgd nesterov wd", p});
  p = {};
  p.kind = K::kSgd;
  p.lr = 0.05f;
  p.momentum = 0.8f;
  p.dampening = 0.1f;
  p.grad_scale = 1.0f / 1024;
  out.push_back({"sgd dampening scaled", p});
  p = {};
  p.kind = K::kAdam;
  p.lr = 1e-3f;
  out.push_back({"adam", p});
  p.weight_decay = 0.01f;
  out.push_back({"adam wd", p});
  p = {};
  p.kind = K::kAdamW;
  p.lr = 1e-3f;
  p.weight_decay = 0.05f;
  p.beta1 = 0.8f;
  p.beta2 = 0.99f;
  out.push_back({"adamw", p});
  p = {};
  p.kind = K::kRmsprop;
  p.lr = 1e-2f;
  out.push_back({"rmsprop", p});
  p.momentum = 0.9f;
  p.centered = true;
  p.weight_decay = 1e-3f;
  out.push_back({"rmsprop centered momentum", p});
  p = {};
  p.kind = K::kAdagrad;
  p.lr = 0.1f;
  p.eps = 1e-10f;
  p.lr_decay = 0.01f;
  p.initial_accumulator_value = 0.1f;
  out.push_back({"adagrad", p});
  return out;
}

// Five steps of every optimizer kind on the device against core/optimizer.h:
// the host device bit for bit, CUDA within kOptimizerUlps (docs/gpu.md).
constexpr int64_t kOptimizerUlps = 4;

// A top-k wire against the CPU's: the indices bit for bit, the values bit for
// bit except NaN, whose payload is the hardware's (x86 keeps the operand's
// quiet NaN, 0x7fc00000 here; CUDA arithmetic returns the canonical
// 0x7fffffff), so two NaNs are equal. Names the first position that differs.
void ExpectSameWire(const std::vector<uint8_t>& got, const std::vector<uint8_t>& expect,
                    int64_t k) {
  ASSERT_EQ(got.size(), expect.size());
  for (int64_t j = 0; j < k; ++j) {
    uint32_t gi, ei;
    std::memcpy(&gi, got.data() + 4 * j, 4);
    std::memcpy(&ei, expect.data() + 4 * j, 4);
    ASSERT_EQ(gi, ei) << "index at position " << j << " of " << k;
  }
  for (int64_t j = 0; j < k; ++j) {
    float gv, ev;
    std::memcpy(&gv, got.data() + 4 * (k + j), 4);
    std::memcpy(&ev, expect.data() + 4 * (k + j), 4);
    if (std::isnan(gv) && std::isnan(ev)) continue;
    ASSERT_EQ(Bits(gv), Bits(ev)) << "value at position " << j << " of " << k << ": " << gv
                                  << " against " << ev;
  }
}

// Top-k with error feedback (core/topk.h) over three steps: the wire (indices
// and values, NaN's payload aside) and the residual equal the CPU's bit for bit, also with many
// ties at the threshold (values on a coarse grid), NaN, infinities and
// signed zeros, for buckets of one chunk, of several and of more chunks than
// the CUDA plan pass scans at once (1024 chunks of 4096).
TEST_P(DeviceTest, TopkMatchesTheCpuBitForBit) {
  struct Case {
    size_t n;
    double ratio;        // k = TopkCount(ratio, n) ...
    int64_t fixed = -1;  // ... unless this is set
  };
  const std::vector<Case> cases = {
      {1, 0.5},     {7, 0, 0},       {7, 0, 7},           {4096, 0.01},
      {4097, 0, 1}, {100003, 0.013}, {100003, 0, 100003}, {4300001, 0.001}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c : cases) {
    const int64_t n = static_cast<int64_t>(c.n);
    const int64_t k = c.fixed >= 0 ? c.fixed : TopkCount(c.ratio, n);
    SCOPED_TRACE(testing::Message() << "n=" << n << " k=" << k);
    std::vector<float> grad = Random(c.n, 20 + static_cast<uint32_t>(c.n));
    for (size_t i = 0; i < c.n; ++i) {
      grad[i] = std::round(grad[i] * 8) / 8;  // ties at every level
      if (i % 997 == 5) grad[i] = -0.f;
    }
    if (c.n > 100) {
      grad[3] = nan;
      grad[50] = -inf;
      grad[c.n - 1] = inf;
    }
    std::vector<float> residual = Random(c.n, 30, -0.0625f, 0.0625f);
    auto dgrad = Upload(grad);
    auto dresidual = Upload(residual);
    auto dwire = Zeros<uint8_t>(std::max<size_t>(SparseBytes(k), 1));
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step);
      std::vector<uint8_t> expect(SparseBytes(k));
      tessel::TopkCompress(grad.data(), residual.data(), n, k, expect.data());
      device_->TopkCompress(Stream::kCompute, dgrad.data(), dresidual.data(), n, k, dwire.data());
      std::vector<uint8_t> wire = Download(dwire);
      wire.resize(expect.size());
      ExpectSameWire(wire, expect, k);
      if (HasFatalFailure()) return;
      std::vector<float> got = Download(dresidual);
      for (size_t i = 0; i < c.n; ++i) ASSERT_EQ(Bits(got[i]), Bits(residual[i])) << i;
    }
  }
}

TEST_P(DeviceTest, OptimizersMatchTheCpu) {
  const size_t n = 10007;
  for (const NamedOptimizer& o : Optimizers()) {
    SCOPED_TRACE(o.name);
    ASSERT_TRUE(ValidateOptimizerParams(o.p).ok());
    const int slots = StateSlots(o.p);
    std::vector<float> params = Random(n, 10);
    std::vector<std::vector<float>> state(slots, std::vector<float>(n));
    std::vector<float*> state_ptrs;
    for (auto& s : state) state_ptrs.push_back(s.data());
    InitState(o.p, state_ptrs.data(), n);
    auto dparams = Upload(params);
    std::vector<DeviceBuffer<float>> dstate;
    std::vector<float*> dstate_ptrs;
    for (auto& s : state) {
      dstate.push_back(Upload(s));
      dstate_ptrs.push_back(dstate.back().data());
    }
    for (int64_t step = 1; step <= 5; ++step) {
      std::vector<float> grad = Random(n, 100 + static_cast<uint32_t>(step), -2, 2);
      auto dgrad = Upload(grad);
      device_->ApplyUpdate(Stream::kCompute, o.p, step, dparams.data(), dgrad.data(),
                           dstate_ptrs.data(), n);
      tessel::ApplyUpdate(o.p, step, params.data(), grad.data(), state_ptrs.data(), n);
      ASSERT_TRUE(device_->SynchronizeStream(Stream::kCompute).ok());
    }
    std::vector<float> got = Download(dparams);
    int64_t worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, Ulps(got[i], params[i]));
    for (int k = 0; k < slots; ++k) {
      std::vector<float> s = Download(dstate[k]);
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, Ulps(s[i], state[k][i]));
    }
    std::cout << o.name << ": worst difference " << worst << " ulp\n";
    EXPECT_LE(worst, exact_products() ? 0 : kOptimizerUlps);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceTest, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(OpenDevice, NamesWhatItKnows) {
  auto bad = OpenDevice("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("host, cuda"), std::string::npos) << bad.status();
  auto cuda = OpenDevice("cuda");
  if (!cuda.ok()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
    std::cout << "cuda: " << cuda.status().message() << "\n";
  }
}

// Each implementation's own side is reached from its kind only.
TEST(DeviceKinds, FromGivesTheImplementationOfItsKindOnly) {
  std::unique_ptr<Device> host = NewHostDevice();
  EXPECT_EQ(HostDevice::From(host.get()), host.get());
  EXPECT_EQ(CudaDevice::From(host.get()), nullptr);
  EXPECT_EQ(HostDevice::From(nullptr), nullptr);
  EXPECT_EQ(CudaDevice::From(nullptr), nullptr);
  auto cuda = OpenDevice("cuda");
  if (cuda.ok()) {
    EXPECT_EQ(CudaDevice::From(cuda->get()), cuda->get());
    EXPECT_EQ(HostDevice::From(cuda->get()), nullptr);
  }
}

// HostDevice::Enqueue runs CPU work in stream order with the device's own.
TEST(DeviceKinds, HostWorkRunsInStreamOrder) {
  std::unique_ptr<Device> device = NewHostDevice();
  HostDevice* host = HostDevice::From(device.get());
  auto buffer = DeviceBuffer<float>::Create(device.get(), 4);
  ASSERT_TRUE(buffer.ok());
  float* p = buffer->data();
  std::atomic<float> seen{0};
  device->Fill(Stream::kCompute, p, 3.0f, 4);
  host->Enqueue(Stream::kCompute, [p, &seen] { seen = p[3]; });
  device->Fill(Stream::kCompute, p, 5.0f, 4);
  ASSERT_TRUE(device->SynchronizeStream(Stream::kCompute).ok());
  EXPECT_EQ(seen.load(), 3.0f);
  EXPECT_EQ(p[0], 5.0f);
}

// What other CUDA code records on the device (model/cuda_layers.cc) is the
// device's sticky error.
TEST(DeviceKinds, CudaCodeRecordsIntoTheDevicesStickyError) {
  auto device = OpenDevice("cuda");
  if (!device.ok()) GTEST_SKIP() << device.status().message();
  CudaDevice* cuda = CudaDevice::From(device->get());
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(cuda->SynchronizeStream(Stream::kCompute).ok());
  EXPECT_TRUE(cuda->Check(cudaSuccess, "nothing"));
  cuda->RecordError(absl::InvalidArgumentError("first"));
  cuda->RecordError(absl::InternalError("second"));
  EXPECT_EQ(cuda->SynchronizeStream(Stream::kToHost), absl::InvalidArgumentError("first"));
  auto e = cuda->NewEvent();
  EXPECT_EQ(cuda->Synchronize(e.get()), absl::InvalidArgumentError("first"));
}

}  // namespace
}  // namespace tessel::gpu
