// DdpState: the local update equals the optimizer kernel on the averaged
// gradient, bit for bit; mixed precision widens chunk by chunk and rounds the
// masters; the digest tells states apart.
#include "worker/internal/ddp_state.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tessel::internal {
namespace {

OptimizerParams Adam() {
  OptimizerParams o;
  o.kind = OptimizerParams::Kind::kAdam;
  o.lr = 1e-2f;
  return o;
}

ModelBuffers Buffers(size_t n, bool half) {
  ModelBuffers b;
  b.params.resize(n);
  for (size_t i = 0; i < n; ++i) b.params[i] = std::sin(static_cast<float>(i));
  if (half) {
    b.params_half.resize(n);
    b.grads_half.resize(n);
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = 0.01f * std::cos(static_cast<float>(i));
    FloatToHalf(HalfType::kBF16, g.data(), b.grads_half.data(), n);
  } else {
    b.grads.resize(n);
    for (size_t i = 0; i < n; ++i) b.grads[i] = 0.01f * std::cos(static_cast<float>(i));
  }
  return b;
}

// Tensor b gets no gradient at step 2: it keeps its values and state, and its
// own step lags by one from then on (torch's per-parameter state['step']).
TEST(DdpStateTest, ApplyEqualsTheOptimizerKernelPerTensor) {
  constexpr size_t n = 40000;  // more than one chunk of the half path
  constexpr size_t na = 30000;
  auto layout = Layout::Create({{"a", {static_cast<int64_t>(na)}}, {"b", {10000}}}, 1, 1, n);
  ASSERT_TRUE(layout.ok());
  for (bool half : {false, true}) {
    SCOPED_TRACE(half ? "bf16" : "fp32");
    ModelBuffers b = Buffers(n, half);
    DdpState ddp(Adam());
    ddp.Init(n, true);
    EXPECT_EQ(ddp.bytes(), static_cast<int64_t>(2 * n * sizeof(float)));

    std::vector<float> want(b.params.begin(), b.params.end());
    std::vector<float> grad(n);
    if (half) {
      HalfToFloat(HalfType::kBF16, b.grads_half.data(), grad.data(), n);
    } else {
      grad.assign(b.grads.begin(), b.grads.end());
    }
    std::vector<std::vector<float>> slots(2, std::vector<float>(n));
    float* state[kMaxStateSlots] = {slots[0].data(), slots[1].data()};
    InitState(Adam(), state, n);
    for (int64_t step = 1; step <= 3; ++step) {
      ApplyUpdate(Adam(), step, want.data(), grad.data(), state, na);
      if (step != 2) {
        float* tail[kMaxStateSlots] = {slots[0].data() + na, slots[1].data() + na};
        ApplyUpdate(Adam(), step == 1 ? 1 : step - 1, want.data() + na, grad.data() + na, tail,
                    n - na);
      } else {
        ddp.set_skip_now({0, 1});
      }
      ASSERT_TRUE(ddp.Apply(step, half ? std::optional<HalfType>(HalfType::kBF16) : std::nullopt,
                            *layout, &b)
                      .ok());
    }
    EXPECT_EQ(ddp.skips(), (std::vector<int64_t>{0, 1}));
    ASSERT_EQ(std::vector<float>(b.params.begin(), b.params.end()), want);
    EXPECT_EQ(ddp.slots()[0], slots[0]);
    if (half) {
      std::vector<uint16_t> rounded(n);
      FloatToHalf(HalfType::kBF16, want.data(), rounded.data(), n);
      EXPECT_EQ(std::vector<uint16_t>(b.params_half.begin(), b.params_half.end()), rounded);
    }
  }
}

TEST(DdpStateTest, DigestCoversStepParamsAndState) {
  ModelBuffers b = Buffers(100, false);
  DdpState ddp(Adam());
  ddp.Init(100, true);
  const uint64_t d = ddp.Digest(5, b.params);
  EXPECT_EQ(d, ddp.Digest(5, b.params));
  EXPECT_NE(d, ddp.Digest(6, b.params));
  b.params[7] += 1e-7f;
  EXPECT_NE(d, ddp.Digest(5, b.params));
  b.params[7] -= 1e-7f;
  ddp.slots()[1][3] = 1.f;
  const uint64_t d2 = ddp.Digest(5, b.params);
  EXPECT_NE(d, d2);
  ddp.set_skips({0, 0});  // none: the same state
  EXPECT_EQ(d2, ddp.Digest(5, b.params));
  ddp.set_skips({0, 1});
  EXPECT_NE(d2, ddp.Digest(5, b.params));
}

TEST(DdpStateTest, AReplacementHoldsNoState) {
  DdpState ddp(Adam());
  ddp.Init(10, /*holds=*/false);
  EXPECT_FALSE(ddp.holds_state());
  ddp.set_holds_state(true);
  EXPECT_TRUE(ddp.holds_state());
}

// Counts its calls; Load fails when told to. Holds the state it was given.
class FakeUpdater : public DdpUpdater {
 public:
  explicit FakeUpdater(float value, bool refuse_load = false)
      : value_(value), refuse_load_(refuse_load) {}
  absl::Status Apply(const OptimizerParams&, absl::Span<const Run>) override {
    return absl::OkStatus();
  }
  absl::Status Store(float* params, absl::Span<float* const>) override {
    ++stores;
    params[0] = value_;
    return absl::OkStatus();
  }
  absl::Status Load(const float* params, absl::Span<const float* const>) override {
    ++loads;
    if (refuse_load_) return absl::InternalError("no room on the device");
    value_ = params[0];
    return absl::OkStatus();
  }
  int stores = 0;
  int loads = 0;

 private:
  float value_;
  const bool refuse_load_;
};

TEST(DdpStateTest, InstallingAnUpdaterHandsTheStateOverAndAFailedOneChangesNothing) {
  DdpState ddp(Adam());
  ddp.Init(4, /*holds=*/true);
  ModelBuffers b = Buffers(4, /*half=*/false);
  b.params[0] = 1.f;
  FakeUpdater a(/*value=*/0.f);
  ASSERT_TRUE(ddp.InstallUpdater(&a, std::nullopt, &b).ok());
  EXPECT_EQ(ddp.updater(), &a);
  EXPECT_EQ(a.loads, 1);  // took the worker's parameters
  EXPECT_EQ(a.stores, 0);
  ASSERT_TRUE(ddp.InstallUpdater(&a, std::nullopt, &b).ok());  // the same: nothing
  EXPECT_EQ(a.loads, 1);

  FakeUpdater refusing(/*value=*/5.f, /*refuse_load=*/true);
  absl::Status s = ddp.InstallUpdater(&refusing, std::nullopt, &b);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_EQ(ddp.updater(), &a);  // the old one stays
  EXPECT_EQ(a.stores, 1);        // the host copies were refreshed from it first
  EXPECT_EQ(b.params[0], 1.f);

  ASSERT_TRUE(ddp.InstallUpdater(nullptr, std::nullopt, &b).ok());
  EXPECT_EQ(ddp.updater(), nullptr);
  EXPECT_EQ(a.stores, 2);  // the worker's own copies are current again
}

}  // namespace
}  // namespace tessel::internal
