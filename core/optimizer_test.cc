// ApplyUpdate and OptimizerUpdate (core/optimizer.h): every configuration
// against a double-precision reference, step by step and over a trajectory;
// independence of length and split; specific torch semantics. Golden
// trajectories from torch are in optimizer_golden_test.cc, the reductions
// and the fused ReduceAndApply in reduce_test.cc.
#include "core/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/optimizer_testing.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;
using optimizer_testing::AllConfigs;
using optimizer_testing::BitwiseEqual;
using optimizer_testing::Config;
using optimizer_testing::Describe;
using optimizer_testing::Perturb;
using optimizer_testing::RandomGrad;
using optimizer_testing::RandomVector;
using optimizer_testing::RefScales;
using optimizer_testing::RefState;
using optimizer_testing::RefStateFrom;
using optimizer_testing::RefStep;
using optimizer_testing::ToDouble;
using optimizer_testing::ToleranceTracker;
using optimizer_testing::Trajectory;

class OptimizerConfigTest : public testing::TestWithParam<Config> {};

// Each step starts the double reference from the kernel's own float state, so
// the comparison measures one step's rounding (not drift over a trajectory)
// and can use a tight tolerance: 1e-6 relative, plus an absolute slack of
// 2^-22 (4 float ulps) of the terms' magnitude for entries that cancel.
TEST_P(OptimizerConfigTest, MatchesDoubleReferenceStepByStep) {
  const Config& config = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(config.name));
  ToleranceTracker params_tol(1e-6, 0x1p-22);
  ToleranceTracker state_tol(1e-6, 0x1p-22);
  constexpr int kSteps = 12;
  int checked = 0;
  for (size_t n : {1, 7, 8, 9, 33, 100, 1000, 4099}) {
    for (int trial = 0; trial < 3; ++trial) {
      const OptimizerParams p = trial == 0 ? config.params : Perturb(config.params, rng);
      ASSERT_TRUE(ValidateOptimizerParams(p).ok()) << Describe(p);
      Trajectory run(p, RandomVector(rng, n, -2.0, 2.0));
      for (int64_t step = 1; step <= kSteps; ++step) {
        const std::vector<float> grad = RandomGrad(rng, n);
        std::vector<double> ref_params = ToDouble(run.params);
        RefState ref_state = RefStateFrom(run.state);
        RefScales scales;
        RefStep(p, step, ref_params, ToDouble(grad), ref_state, &scales);
        run.Step(step, grad);
        for (size_t i = 0; i < n; ++i) {
          const std::string where =
              absl::StrFormat("%s n=%d step=%d i=%d", Describe(p), n, step, i);
          params_tol.Check(run.params[i], ref_params[i], "param " + where, scales.param[i]);
          for (size_t k = 0; k < run.state.size(); ++k) {
            state_tol.Check(run.state[k][i], ref_state.slot[k][i],
                            absl::StrCat("slot", k, " ", where), scales.slot[k][i]);
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_LE(params_tol.worst, 1.0) << params_tol.where;
  EXPECT_LE(state_tol.worst, 1.0) << state_tol.where;
  std::printf(
      "[ info ] %s: %d element-steps, worst error %.3g (params) %.3g (state) of tolerance\n",
      config.name.c_str(), checked, params_tol.worst, state_tol.worst);
}

// Free-running over many steps: float and double trajectories drift apart only
// by accumulated rounding.
TEST_P(OptimizerConfigTest, TracksDoubleReferenceOverTrajectory) {
  const Config& config = GetParam();
  std::mt19937_64 rng(std::hash<std::string>{}(config.name) + 1);
  constexpr size_t kN = 257;
  constexpr int kSteps = 20;
  Trajectory run(config.params, RandomVector(rng, kN, -2.0, 2.0));
  std::vector<double> ref_params = ToDouble(run.params);
  RefState ref_state;
  ToleranceTracker tol(1e-5, 1e-6);
  for (int64_t step = 1; step <= kSteps; ++step) {
    const std::vector<float> grad = RandomGrad(rng, kN);
    RefStep(config.params, step, ref_params, ToDouble(grad), ref_state);
    run.Step(step, grad);
    for (size_t i = 0; i < kN; ++i) {
      tol.Check(run.params[i], ref_params[i], absl::StrFormat("step %d i %d", step, i));
    }
  }
  EXPECT_LE(tol.worst, 1.0) << Describe(config.params) << ": " << tol.where;
}

// Vector body and scalar remainder do the same operations: any element's
// result is independent of n, of the offset it sits at, and of how a call is
// split.
TEST_P(OptimizerConfigTest, ResultIndependentOfLengthAndSplit) {
  const Config& config = GetParam();
  std::mt19937_64 rng(7);
  constexpr size_t kN = 1037;
  const std::vector<float> init = RandomVector(rng, kN, -2.0, 2.0);
  Trajectory whole(config.params, init);
  Trajectory pieces(config.params, init);
  for (int64_t step = 1; step <= 4; ++step) {
    const std::vector<float> grad = RandomGrad(rng, kN);
    whole.Step(step, grad);
    size_t off = 0;
    while (off < kN) {
      const size_t len = std::min<size_t>(kN - off, 1 + rng() % 19);
      std::vector<float*> state;
      for (auto& s : pieces.state) state.push_back(s.data() + off);
      ApplyUpdate(config.params, step, pieces.params.data() + off, grad.data() + off, state.data(),
                  len);
      off += len;
    }
  }
  EXPECT_TRUE(BitwiseEqual(whole.params, pieces.params));
  for (size_t k = 0; k < whole.state.size(); ++k) {
    EXPECT_TRUE(BitwiseEqual(whole.state[k], pieces.state[k])) << "slot " << k;
  }
}

// A prepared OptimizerUpdate run block by block is one ApplyUpdate over the
// whole range (ReduceAndApply relies on it).
TEST_P(OptimizerConfigTest, OptimizerUpdateRunInBlocksEqualsApplyUpdate) {
  const Config& config = GetParam();
  std::mt19937_64 rng(17);
  constexpr size_t kN = 2500;
  const std::vector<float> init = RandomVector(rng, kN, -2.0, 2.0);
  Trajectory whole(config.params, init);
  Trajectory blocks(config.params, init);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grad = RandomGrad(rng, kN);
    whole.Step(step, grad);
    const OptimizerUpdate update(config.params, step);
    std::vector<float*> state = blocks.StatePtrs();
    for (size_t off = 0; off < kN; off += 1024) {
      const size_t len = std::min<size_t>(1024, kN - off);
      update.Run(blocks.params.data() + off, grad.data() + off, state.data(), off, len);
    }
  }
  EXPECT_TRUE(BitwiseEqual(whole.params, blocks.params));
  for (size_t k = 0; k < whole.state.size(); ++k) {
    EXPECT_TRUE(BitwiseEqual(whole.state[k], blocks.state[k])) << "slot " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OptimizerConfigTest, testing::ValuesIn(AllConfigs()),
                         [](const testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

TEST(OptimizerConfigs, CoverEveryValidCombination) {
  // SGD without momentum: dampening x wd = 4 (nesterov needs momentum).
  // SGD with momentum: (dampening x nesterov, minus nesterov with dampening)
  // x wd = 6. Adam and AdamW x wd = 4. RMSprop centered x momentum x wd = 8.
  // Adagrad wd x lr_decay x initial_accumulator_value = 8.
  EXPECT_EQ(AllConfigs().size(), 30u);
  for (const Config& c : AllConfigs()) {
    EXPECT_LE(StateSlots(c.params), kMaxStateSlots) << c.name;
  }
}

// ---------------------------------------------------------------------------
// Specific semantics.

TEST(OptimizerTest, SgdFirstMomentumStepClonesGradient) {
  OptimizerParams p;
  p.kind = Kind::kSgd;
  p.lr = 0.5f;
  p.momentum = 0.9f;
  p.dampening = 0.5f;
  std::vector<float> params = {1.0f, 2.0f}, buf = {0.0f, 0.0f};
  float* state[] = {buf.data()};
  const std::vector<float> g1 = {0.25f, -1.0f};
  ApplyUpdate(p, 1, params.data(), g1.data(), state, 2);
  // Step 1: buffer = g (no dampening), param -= lr * buffer.
  EXPECT_EQ(buf, (std::vector<float>{0.25f, -1.0f}));
  EXPECT_EQ(params, (std::vector<float>{0.875f, 2.5f}));
  // Step 2: buffer = 0.9 * buffer + 0.5 * g.
  const std::vector<float> g2 = {1.0f, 1.0f};
  ApplyUpdate(p, 2, params.data(), g2.data(), state, 2);
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 0.25f + 0.5f);
  EXPECT_FLOAT_EQ(buf[1], 0.9f * -1.0f + 0.5f);
}

TEST(OptimizerTest, AdamFirstStepMovesEachParamByAboutLr) {
  // With bias correction, the first Adam step is lr * g / (|g| + eps') = ~lr * sign(g).
  OptimizerParams p;
  p.kind = Kind::kAdam;
  p.lr = 0.01f;
  std::vector<float> params = {1.0f, 1.0f, 1.0f}, m(3), v(3);
  float* state[] = {m.data(), v.data()};
  const std::vector<float> g = {3.0f, -0.001f, 0.0f};
  ApplyUpdate(p, 1, params.data(), g.data(), state, 3);
  EXPECT_NEAR(params[0], 0.99f, 1e-6);
  EXPECT_NEAR(params[1], 1.01f, 1e-5);
  EXPECT_EQ(params[2], 1.0f);  // zero gradient: m = 0, update 0 / eps = 0
}

TEST(OptimizerTest, AdamWDecaysParamsEvenWithZeroGradient) {
  OptimizerParams p;
  p.kind = Kind::kAdamW;
  p.lr = 0.1f;
  p.weight_decay = 0.5f;
  std::vector<float> params = {2.0f}, m(1), v(1);
  float* state[] = {m.data(), v.data()};
  const std::vector<float> g = {0.0f};
  ApplyUpdate(p, 1, params.data(), g.data(), state, 1);
  EXPECT_EQ(params[0], 2.0f * static_cast<float>(1.0 - 0.1f * 0.5));  // param *= 1 - lr * wd
  EXPECT_EQ(m[0], 0.0f);
}

TEST(OptimizerTest, RmspropFirstStepAndSlotOrder) {
  // alpha = 0.5 and eps = 0 keep the first step exact: square_avg = g^2 / 2,
  // grad_avg = g / 2, centered variance g^2 / 4, so avg = |g| / 2.
  const std::vector<float> g = {2.0f, -4.0f};
  for (bool centered : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE(absl::StrCat("centered=", centered, " momentum=", momentum));
      OptimizerParams p;
      p.kind = Kind::kRmsprop;
      p.lr = 0.5f;
      p.alpha = 0.5f;
      p.eps = 0;
      p.momentum = momentum;
      p.centered = centered;
      ASSERT_TRUE(ValidateOptimizerParams(p).ok());
      Trajectory run(p, {1.0f, 1.0f});
      ASSERT_EQ(run.state.size(), 1u + (momentum > 0) + centered);
      run.Step(1, g);
      EXPECT_EQ(run.state[0], (std::vector<float>{2.0f, 8.0f}));  // square_avg
      // Update g / avg: centered avg = |g| / 2, plain avg = |g| / sqrt(2).
      const double u = centered ? 2.0 : std::sqrt(2.0);
      if (momentum > 0) {
        // momentum_buffer starts at 0 (not at the gradient, unlike SGD).
        EXPECT_FLOAT_EQ(run.state[1][0], u);
        EXPECT_FLOAT_EQ(run.state[1][1], -u);
      }
      if (centered) {
        EXPECT_EQ(run.state.back(), (std::vector<float>{1.0f, -2.0f}));  // grad_avg
      }
      EXPECT_FLOAT_EQ(run.params[0], 1.0 - 0.5 * u);
      EXPECT_FLOAT_EQ(run.params[1], 1.0 + 0.5 * u);
    }
  }
}

TEST(OptimizerTest, RmspropIgnoresStep) {
  OptimizerParams p;
  p.kind = Kind::kRmsprop;
  p.lr = 0.01f;
  p.momentum = 0.9f;
  p.centered = true;
  p.weight_decay = 0.1f;
  std::mt19937_64 rng(5);
  const std::vector<float> init = RandomVector(rng, 100, -1, 1);
  const std::vector<float> grad = RandomGrad(rng, 100);
  Trajectory a(p, init), b(p, init);
  a.Step(1, grad);
  b.Step(123456789, grad);
  EXPECT_TRUE(BitwiseEqual(a.params, b.params));
  for (size_t k = 0; k < a.state.size(); ++k) EXPECT_TRUE(BitwiseEqual(a.state[k], b.state[k]));
}

TEST(OptimizerTest, AdagradDecaysLearningRateBySteps) {
  // eps = 0, zero initial sum, g = 1: sum = 1, std = 1, so params move by
  // exactly -clr = -lr / (1 + (step - 1) * lr_decay), rounded to float once.
  OptimizerParams p;
  p.kind = Kind::kAdagrad;
  p.lr = 1.0f;
  p.lr_decay = 0.5f;
  p.eps = 0;
  for (int64_t step : {1, 2, 3, 7}) {
    Trajectory run(p, {0.0f});
    run.Step(step, {1.0f});
    EXPECT_EQ(run.state[0][0], 1.0f);
    EXPECT_EQ(run.params[0], static_cast<float>(-1.0 / (1 + (step - 1) * 0.5))) << step;
  }
  // initial_accumulator_value seeds the sum: 16 + 3^2 = 25, std = 5.
  p.lr_decay = 0;
  p.initial_accumulator_value = 16.0f;
  Trajectory run(p, {0.0f});
  EXPECT_EQ(run.state[0][0], 16.0f);
  run.Step(1, {3.0f});
  EXPECT_EQ(run.state[0][0], 25.0f);
  EXPECT_EQ(run.params[0], -0.6f);
}

TEST(OptimizerTest, AdagradStepCounterStallsAt2Pow24LikeTorch) {
  // torch's state['step'] is a float32 tensor: 2^24 + 1 rounds back to 2^24,
  // so the decayed learning rate stops decaying there.
  OptimizerParams p;
  p.kind = Kind::kAdagrad;
  p.lr = 1.0f;
  p.lr_decay = 0.25f;
  p.eps = 0;
  auto run = [&p](int64_t step) {
    Trajectory t(p, {0.0f});
    t.Step(step, {1.0f});
    return t.params[0];
  };
  constexpr int64_t kStall = int64_t{1} << 24;
  EXPECT_EQ(run(kStall), static_cast<float>(-1.0 / (1 + (kStall - 1) * 0.25)));
  EXPECT_EQ(run(kStall + 1), run(kStall));
  EXPECT_EQ(run(int64_t{1} << 40), run(kStall));
  EXPECT_NE(run(kStall / 2), run(kStall));
}

TEST(OptimizerTest, EmptyInputIsANoOp) {
  for (const Config& c : AllConfigs()) {
    InitState(c.params, nullptr, 0);
    ApplyUpdate(c.params, 1, nullptr, nullptr, nullptr, 0);
  }
}

TEST(OptimizerDeathTest, StepBelowOneAborts) {
  OptimizerParams p;
  float x = 1.0f, g = 1.0f;
  EXPECT_DEATH(ApplyUpdate(p, 0, &x, &g, nullptr, 1), "step must be >= 1");
  EXPECT_DEATH(OptimizerUpdate(p, 0), "step must be >= 1");
}

}  // namespace
}  // namespace tessel
