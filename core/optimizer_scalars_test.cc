// MakeOptimizerScalars (core/optimizer_scalars.h): each scalar is torch's
// Python expression evaluated in double and rounded to float once; the step
// enters only where torch uses it, and stalls where torch's float32 counter
// does.
#include "core/optimizer_scalars.h"

#include <cmath>
#include <cstdint>

#include "core/optimizer_params.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

float Rounded(double x) { return static_cast<float>(x); }

TEST(OptimizerScalarsTest, SgdMomentumDampeningAndFirstStep) {
  OptimizerParams p;
  p.lr = 0.1f;
  p.momentum = 0.9f;
  p.dampening = 0.3f;
  p.weight_decay = 0.01f;
  const OptimizerScalars s = MakeOptimizerScalars(p, 1);
  EXPECT_TRUE(s.has_momentum);
  EXPECT_TRUE(s.has_weight_decay);
  EXPECT_TRUE(s.first_step);
  EXPECT_FALSE(s.nesterov);
  EXPECT_FALSE(s.scale_grad);
  EXPECT_EQ(s.momentum, 0.9f);
  EXPECT_EQ(s.weight_decay, 0.01f);
  EXPECT_EQ(s.neg_lr, -0.1f);
  EXPECT_EQ(s.one_minus_dampening, Rounded(1.0 - static_cast<double>(0.3f)));
  EXPECT_FALSE(MakeOptimizerScalars(p, 2).first_step);
  p.momentum = 0;
  p.dampening = 0;
  EXPECT_FALSE(MakeOptimizerScalars(p, 1).has_momentum);
}

TEST(OptimizerScalarsTest, AdamBiasCorrectionsInDouble) {
  OptimizerParams p;
  p.kind = Kind::kAdam;
  p.lr = 1e-3f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  for (int64_t step : {1, 2, 10, 1000}) {
    const OptimizerScalars s = MakeOptimizerScalars(p, step);
    const double t = static_cast<double>(step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
    EXPECT_EQ(s.neg_step_size, Rounded(-(static_cast<double>(p.lr) / bc1))) << step;
    EXPECT_EQ(s.bc2_sqrt, Rounded(std::sqrt(bc2))) << step;
    EXPECT_EQ(s.one_minus_beta1, Rounded(1.0 - static_cast<double>(p.beta1)));
    EXPECT_EQ(s.one_minus_beta2, Rounded(1.0 - static_cast<double>(p.beta2)));
    EXPECT_EQ(s.beta1, p.beta1);
    EXPECT_EQ(s.beta2, p.beta2);
    EXPECT_EQ(s.eps, p.eps);
  }
  // Long after torch's counter stalls (2^24) both corrections are exactly 1.
  const OptimizerScalars late = MakeOptimizerScalars(p, kTorchStepLimit + 12345);
  EXPECT_EQ(late.bc2_sqrt, 1.0f);
  EXPECT_EQ(late.neg_step_size, -p.lr);
}

TEST(OptimizerScalarsTest, AdamWDecoupledDecay) {
  OptimizerParams p;
  p.kind = Kind::kAdamW;
  p.lr = 0.1f;
  p.weight_decay = 0.3f;
  const OptimizerScalars s = MakeOptimizerScalars(p, 1);
  EXPECT_EQ(s.decay, Rounded(1.0 - static_cast<double>(p.lr) * static_cast<double>(0.3f)));
  // The L2 flag follows weight_decay; the AdamW kernel ignores it (decay only).
  EXPECT_TRUE(s.has_weight_decay);
}

TEST(OptimizerScalarsTest, RmspropIgnoresTheStep) {
  OptimizerParams p;
  p.kind = Kind::kRmsprop;
  p.lr = 0.01f;
  p.alpha = 0.95f;
  p.momentum = 0.5f;
  p.centered = true;
  const OptimizerScalars a = MakeOptimizerScalars(p, 1);
  const OptimizerScalars b = MakeOptimizerScalars(p, 987654321);
  EXPECT_TRUE(a.has_momentum);
  EXPECT_TRUE(a.centered);
  EXPECT_EQ(a.one_minus_alpha, Rounded(1.0 - static_cast<double>(0.95f)));
  EXPECT_EQ(a.neg_lr, -0.01f);
  EXPECT_EQ(a.alpha, b.alpha);
  EXPECT_EQ(a.one_minus_alpha, b.one_minus_alpha);
  EXPECT_EQ(a.neg_lr, b.neg_lr);
  EXPECT_EQ(a.first_step, b.first_step);
}

TEST(OptimizerScalarsTest, AdagradDecayStallsWithTorchsCounter) {
  OptimizerParams p;
  p.kind = Kind::kAdagrad;
  p.lr = 0.5f;
  p.lr_decay = 0.25f;
  p.eps = 1e-10f;
  for (int64_t step : {int64_t{1}, int64_t{2}, int64_t{7}, kTorchStepLimit}) {
    const double clr = 0.5 / (1.0 + (static_cast<double>(step) - 1.0) * 0.25);
    EXPECT_EQ(MakeOptimizerScalars(p, step).neg_clr, Rounded(-clr)) << step;
  }
  EXPECT_EQ(MakeOptimizerScalars(p, kTorchStepLimit + 1).neg_clr,
            MakeOptimizerScalars(p, kTorchStepLimit).neg_clr);
  EXPECT_EQ(MakeOptimizerScalars(p, int64_t{1} << 40).neg_clr,
            MakeOptimizerScalars(p, kTorchStepLimit).neg_clr);
}

TEST(OptimizerScalarsTest, GradScaleOnlyWhenNotOne) {
  OptimizerParams p;
  EXPECT_FALSE(MakeOptimizerScalars(p, 1).scale_grad);
  p.grad_scale = 1.0f / 512.0f;
  const OptimizerScalars s = MakeOptimizerScalars(p, 1);
  EXPECT_TRUE(s.scale_grad);
  EXPECT_EQ(s.grad_scale, 1.0f / 512.0f);
}

TEST(OptimizerScalarsDeathTest, StepBelowOneAborts) {
  EXPECT_DEATH(MakeOptimizerScalars(OptimizerParams(), 0), "step must be >= 1");
}

}  // namespace
}  // namespace tessel
