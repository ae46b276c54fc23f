// UpdateRule: ZeroUpdate applies the optimizer to the rank-order mean, in
// chunks as in one call, at each tensor's own step, and leaves skipped
// tensors alone; DdpMean writes the mean; holds_params tells them apart.
#include "server/update_rule.h"

#include <cstring>
#include <vector>

#include "core/reduce.h"
#include "core/tensor_steps.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

constexpr int kWorld = 3;

float Value(int rank, int64_t i) {
  return static_cast<float>((i * 7919 + rank * 104729) % 2001 - 1000) / 997.f;
}

// Tensors a (300), b (200), c (500); one shard of all 1000 elements.
Layout MakeLayout() {
  auto layout = Layout::Create({{"a", {300}}, {"b", {200}}, {"c", {500}}}, 1, 1, 256);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

BucketStep Step(int64_t step, std::vector<int64_t> skips = {}, std::vector<uint8_t> skip_now = {}) {
  BucketStep s;
  s.step = step;
  s.optimizer.kind = OptimizerParams::Kind::kAdam;
  s.optimizer.lr = 1e-2f;
  s.skips = std::move(skips);
  s.skip_now = std::move(skip_now);
  return s;
}

OptimizerParams Adam() {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kAdam;
  p.lr = 1e-2f;
  return p;
}

struct Grads {
  std::vector<std::vector<float>> ranks;
  std::vector<const float*> srcs;
  explicit Grads(int64_t n) : ranks(kWorld, std::vector<float>(static_cast<size_t>(n))) {
    for (int r = 0; r < kWorld; ++r) {
      for (int64_t i = 0; i < n; ++i) ranks[r][i] = Value(r, i);
      srcs.push_back(ranks[r].data());
    }
  }
  // The sources shifted to element `at`.
  std::vector<const float*> At(int64_t at) const {
    std::vector<const float*> out;
    for (const float* s : srcs) out.push_back(s + at);
    return out;
  }
};

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(UpdateRuleTest, ZeroUpdateInChunksIsOneReduceAndApply) {
  const Layout layout = MakeLayout();
  const Range range = layout.shard_range(0);
  ZeroUpdate rule(layout, range, kWorld, Adam());
  EXPECT_TRUE(rule.holds_params());
  ASSERT_EQ(rule.state().size(), 2u) << "Adam's exp_avg and exp_avg_sq";
  const int64_t n = range.size();
  Grads g(n);
  std::vector<float> values(static_cast<size_t>(n), 0.5f), want = values;
  std::vector<std::vector<float>> state(2, std::vector<float>(static_cast<size_t>(n), 0.f));
  const BucketStep s = Step(1);
  for (int64_t c = 0; c < n; c += 384) {
    const Range part{c, std::min(n, c + 384)};
    rule.Apply(s, part, g.At(part.begin).data(), kWorld, values.data(), values.data());
  }
  float* st[kMaxStateSlots] = {state[0].data(), state[1].data()};
  ReduceAndApply(Adam(), 1, want.data(), g.srcs.data(), kWorld, st, static_cast<size_t>(n), kWorld);
  EXPECT_TRUE(Bitwise(values, want));
  EXPECT_TRUE(Bitwise(rule.state()[0], state[0]));
  EXPECT_TRUE(Bitwise(rule.state()[1], state[1]));
}

TEST(UpdateRuleTest, ZeroUpdateLeavesSkippedTensorsAloneAndStepsEachTensorByItsOwnCount) {
  const Layout layout = MakeLayout();
  const Range range = layout.shard_range(0);
  ZeroUpdate rule(layout, range, kWorld, Adam());
  const int64_t n = range.size();
  Grads g(n);
  std::vector<float> values(static_cast<size_t>(n), 0.5f);
  // Step 3: tensor b skipped now; tensor c was skipped once before.
  const BucketStep s = Step(3, {0, 0, 1}, {0, 1, 0});
  rule.Apply(s, {0, n}, g.srcs.data(), kWorld, values.data(), values.data());
  for (int64_t i = 300; i < 500; ++i) {
    ASSERT_EQ(values[i], 0.5f) << "tensor b is skipped";
    ASSERT_EQ(rule.state()[0][i], 0.f) << "and so is its state";
  }
  // Tensors a and c at their own steps (3 and 2), as separate calls would.
  for (auto [begin, end, t_step] : {std::tuple<int64_t, int64_t, int64_t>{0, 300, 3},
                                    std::tuple<int64_t, int64_t, int64_t>{500, 1000, 2}}) {
    std::vector<float> want(static_cast<size_t>(end - begin), 0.5f);
    std::vector<std::vector<float>> state(2, std::vector<float>(want.size(), 0.f));
    float* st[kMaxStateSlots] = {state[0].data(), state[1].data()};
    ReduceAndApply(Adam(), t_step, want.data(), g.At(begin).data(), kWorld, st, want.size(),
                   kWorld);
    EXPECT_EQ(std::memcmp(want.data(), values.data() + begin, want.size() * 4), 0)
        << "tensor at " << begin;
  }
}

// Out of place (a shard's two served versions, server/served_versions.h):
// in chunks on parts of the range, with a skipped tensor in the middle of a
// part, the bits of the in-place update in `out`, the skipped tensor
// carried over from `in`, `in` untouched, the state the same.
TEST(UpdateRuleTest, ZeroUpdateOutOfPlaceIsInPlaceBitwiseAndCarriesSkippedTensors) {
  const Layout layout = MakeLayout();
  const Range range = layout.shard_range(0);
  ZeroUpdate in_place(layout, range, kWorld, Adam()), copied(layout, range, kWorld, Adam());
  const int64_t n = range.size();
  Grads g(n);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = Value(7, i);
  std::vector<float> in = values, out(static_cast<size_t>(n), -9.f);
  for (const BucketStep& s : {Step(1), Step(2, {}, {0, 1, 0}), Step(3, {0, 1, 0})}) {
    for (int64_t c = 0; c < n; c += 384) {  // the part [384, 768) holds b's end and c's start
      const Range part{c, std::min(n, c + 384)};
      in_place.Apply(s, part, g.At(part.begin).data(), kWorld, values.data(), values.data());
      copied.Apply(s, part, g.At(part.begin).data(), kWorld, in.data(), out.data());
    }
    const std::vector<float> before = in;
    ASSERT_TRUE(Bitwise(out, values)) << "step " << s.step;
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(Bitwise(copied.state()[k], in_place.state()[k]));
    if (!s.skip_now.empty()) {
      EXPECT_EQ(std::memcmp(out.data() + 300, before.data() + 300, 200 * 4), 0)
          << "skipped tensor b carried over";
    }
    std::swap(in, out);  // the next step reads this version, writes the other
    EXPECT_TRUE(Bitwise(out, before)) << "in left as it was";
  }
}

TEST(UpdateRuleTest, ZeroUpdateInitializesTheOptimizersState) {
  const Layout layout = MakeLayout();
  OptimizerParams adagrad;
  adagrad.kind = OptimizerParams::Kind::kAdagrad;
  adagrad.initial_accumulator_value = 0.25f;
  ZeroUpdate rule(layout, layout.shard_range(0), kWorld, adagrad);
  ASSERT_EQ(rule.state().size(), 1u);
  EXPECT_EQ(rule.state()[0][17], 0.25f) << "torch's initial accumulator";
}

TEST(UpdateRuleTest, DdpMeanWritesTheMeanAndHoldsNoParameters) {
  const Layout layout = MakeLayout();
  std::unique_ptr<UpdateRule> rule =
      MakeUpdateRule(/*ddp=*/true, layout, layout.shard_range(0), kWorld, Adam());
  EXPECT_FALSE(rule->holds_params());
  EXPECT_TRUE(rule->state().empty());
  const int64_t n = 1000;
  Grads g(n);
  std::vector<float> values(n, 7.f), want(n);
  rule->Apply(Step(4), {100, 600}, g.At(100).data(), kWorld, nullptr, values.data());
  ReduceMean(g.srcs.data(), kWorld, want.data(), n, kWorld);
  EXPECT_EQ(std::memcmp(values.data() + 100, want.data() + 100, 500 * 4), 0);
  EXPECT_EQ(values[99], 7.f);
  EXPECT_EQ(values[600], 7.f);
  EXPECT_TRUE(
      MakeUpdateRule(/*ddp=*/false, layout, layout.shard_range(0), kWorld, Adam())->holds_params());
}

}  // namespace
}  // namespace tessel
