// ReduceSum, ReduceMean and ReduceAndApply (core/reduce.h): the fixed
// left-to-right order, division rather than multiplication, exact aliasing,
// the prefix property shard servers fold with, and the fused path bitwise
// equal to ReduceMean then ApplyUpdate for every configuration.
#include "core/reduce.h"

#include <cstdint>
#include <random>
#include <vector>

#include "core/optimizer.h"
#include "core/optimizer_testing.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using optimizer_testing::AllConfigs;
using optimizer_testing::BitwiseEqual;
using optimizer_testing::Config;
using optimizer_testing::RandomGrad;
using optimizer_testing::RandomVector;
using optimizer_testing::Trajectory;

class ReduceAndApplyConfigTest : public testing::TestWithParam<Config> {};

// (c) The fused path is bitwise the unfused one, across block boundaries.
TEST_P(ReduceAndApplyConfigTest, ReduceAndApplyBitwiseEqualsReduceMeanThenApply) {
  const Config& config = GetParam();
  std::mt19937_64 rng(11);
  for (int w : {1, 2, 3, 5, 8}) {
    for (size_t n : {0, 1, 15, 1023, 1024, 1025, 5000}) {
      const std::vector<float> init = RandomVector(rng, n, -2.0, 2.0);
      Trajectory fused(config.params, init);
      Trajectory unfused(config.params, init);
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<std::vector<float>> srcs;
        std::vector<const float*> src_ptrs;
        for (int j = 0; j < w; ++j) srcs.push_back(RandomGrad(rng, n));
        for (const auto& s : srcs) src_ptrs.push_back(s.data());

        std::vector<float> grad(n);
        ReduceMean(src_ptrs.data(), w, grad.data(), n);
        unfused.Step(step, grad);

        std::vector<float*> state = fused.StatePtrs();
        ReduceAndApply(config.params, step, fused.params.data(), src_ptrs.data(), w, state.data(),
                       n);
      }
      EXPECT_TRUE(BitwiseEqual(fused.params, unfused.params)) << "w=" << w << " n=" << n;
      for (size_t k = 0; k < fused.state.size(); ++k) {
        EXPECT_TRUE(BitwiseEqual(fused.state[k], unfused.state[k]))
            << "w=" << w << " n=" << n << " slot " << k;
      }
    }
  }
}

// (d) Loss scaling: grad_scale multiplies each gradient element (in float)
// before the update, exactly as scaling the gradient first would; the fused
// path does it after the mean. Spans block boundaries and odd lengths.
TEST_P(ReduceAndApplyConfigTest, GradScaleEqualsScalingTheGradientFirst) {
  const Config& config = GetParam();
  OptimizerParams scaled_params = config.params;
  scaled_params.grad_scale = 1.0f / 1024.0f;
  std::mt19937_64 rng(13);
  for (size_t n : {1, 1023, 1025, 3000}) {
    const std::vector<float> init = RandomVector(rng, n, -2.0, 2.0);
    Trajectory scaled(scaled_params, init);
    Trajectory fused(scaled_params, init);
    Trajectory reference(config.params, init);
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<float> a = RandomGrad(rng, n), b = RandomGrad(rng, n);
      for (float& x : a) x *= 1024.0f;  // what a loss scale of 1024 produces
      for (float& x : b) x *= 1024.0f;
      const float* srcs[2] = {a.data(), b.data()};
      std::vector<float> mean(n);
      ReduceMean(srcs, 2, mean.data(), n);
      scaled.Step(step, mean);
      std::vector<float*> state = fused.StatePtrs();
      ReduceAndApply(scaled_params, step, fused.params.data(), srcs, 2, state.data(), n);
      std::vector<float> unscaled(mean);
      for (float& x : unscaled) x *= scaled_params.grad_scale;
      reference.Step(step, unscaled);
    }
    EXPECT_TRUE(BitwiseEqual(scaled.params, reference.params)) << "n=" << n;
    EXPECT_TRUE(BitwiseEqual(fused.params, reference.params)) << "n=" << n;
    for (size_t k = 0; k < reference.state.size(); ++k) {
      EXPECT_TRUE(BitwiseEqual(scaled.state[k], reference.state[k])) << "n=" << n << " slot " << k;
      EXPECT_TRUE(BitwiseEqual(fused.state[k], reference.state[k])) << "n=" << n << " slot " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, ReduceAndApplyConfigTest, testing::ValuesIn(AllConfigs()),
                         [](const testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

TEST(ReduceMeanTest, SumsLeftToRightThenDivides) {
  // Order matters in float: (1e8 + 1) - 1e8 == 0, but 1e8 + (1 - 1e8) == 1.
  const std::vector<float> a = {1e8f, 3.0f}, b = {1.0f, 4.0f}, c = {-1e8f, 5.0f};
  const float* srcs[] = {a.data(), b.data(), c.data()};
  std::vector<float> out(2);
  ReduceMean(srcs, 3, out.data(), 2);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 4.0f);
  // Division, not multiplication by 1/3: they differ for this value.
  const float x = 5.0f;
  ASSERT_NE(x / 3.0f, x * (1.0f / 3.0f));
  const std::vector<float> d = {x}, z = {0.0f};
  const float* srcs2[] = {d.data(), z.data(), z.data()};
  ReduceMean(srcs2, 3, out.data(), 1);
  EXPECT_EQ(out[0], x / 3.0f);
}

TEST(ReduceMeanTest, MatchesScalarDefinitionAndAllowsExactAliasing) {
  std::mt19937_64 rng(3);
  for (int w : {1, 2, 4, 7}) {
    const size_t n = 3000;
    std::vector<std::vector<float>> srcs;
    std::vector<const float*> ptrs;
    for (int j = 0; j < w; ++j) srcs.push_back(RandomGrad(rng, n));
    for (const auto& s : srcs) ptrs.push_back(s.data());
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      float sum = srcs[0][i];
      for (int j = 1; j < w; ++j) sum += srcs[j][i];
      want[i] = sum / static_cast<float>(w);
    }
    std::vector<float> out(n);
    ReduceMean(ptrs.data(), w, out.data(), n);
    EXPECT_TRUE(BitwiseEqual(out, want)) << "w=" << w;
    // In place into the last source.
    ReduceMean(ptrs.data(), w, srcs[w - 1].data(), n);
    EXPECT_TRUE(BitwiseEqual(srcs[w - 1], want)) << "in place, w=" << w;
  }
}

// The prefix property (core/reduce.h): folding ranks [0, k) with ReduceSum,
// then the mean of that partial sum and ranks k..W-1 with divisor W, is the
// mean over all W ranks, bit for bit; so is ReduceSum into its first source.
TEST(ReduceSumTest, PrefixFoldEqualsTheWholeMean) {
  std::mt19937_64 rng(19);
  constexpr int kWorld = 6;
  const size_t n = 2049;
  std::vector<std::vector<float>> ranks;
  std::vector<const float*> ptrs;
  for (int j = 0; j < kWorld; ++j) ranks.push_back(RandomGrad(rng, n));
  for (const auto& r : ranks) ptrs.push_back(r.data());
  std::vector<float> want(n);
  ReduceMean(ptrs.data(), kWorld, want.data(), n);
  for (int k = 1; k < kWorld; ++k) {
    std::vector<float> partial(n);
    ReduceSum(ptrs.data(), k, partial.data(), n);
    std::vector<const float*> rest = {partial.data()};
    for (int j = k; j < kWorld; ++j) rest.push_back(ranks[j].data());
    std::vector<float> got(n);
    ReduceMean(rest.data(), static_cast<int>(rest.size()), got.data(), n, kWorld);
    EXPECT_TRUE(BitwiseEqual(got, want)) << "prefix of " << k << " ranks";
  }
  std::vector<float> acc = ranks[0];
  const float* in_place[] = {acc.data(), ranks[1].data(), ranks[2].data()};
  ReduceSum(in_place, 3, acc.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(acc[i], (ranks[0][i] + ranks[1][i]) + ranks[2][i]) << i;
  }
}

TEST(ReduceTest, EmptyInputIsANoOp) {
  for (const Config& c : AllConfigs()) {
    ReduceAndApply(c.params, 1, nullptr, nullptr, 2, nullptr, 0);
  }
  ReduceMean(nullptr, 3, nullptr, 0);
  ReduceSum(nullptr, 3, nullptr, 0);
}

TEST(ReduceDeathTest, BadRankCountOrStepAborts) {
  OptimizerParams p;
  float x = 1.0f, g = 1.0f;
  const float* srcs[] = {&g};
  EXPECT_DEATH(ReduceAndApply(p, 1, &x, srcs, 0, nullptr, 1), "w must be >= 1");
  EXPECT_DEATH(ReduceAndApply(p, 0, &x, srcs, 1, nullptr, 1), "step must be >= 1");
  EXPECT_DEATH(ReduceMean(srcs, 0, &x, 1), "w must be >= 1");
  EXPECT_DEATH(ReduceSum(srcs, 0, &x, 1), "w must be >= 1");
}

}  // namespace
}  // namespace tessel
