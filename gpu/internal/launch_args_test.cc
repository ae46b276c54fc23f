#include "gpu/internal/launch_args.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel::gpu::internal {
namespace {

using Kind = OptimizerParams::Kind;

int NonNull(const kernels::UpdateState& s) {
  int n = 0;
  for (const float* p :
       {s.momentum_buffer, s.exp_avg, s.exp_avg_sq, s.square_avg, s.grad_avg, s.sum}) {
    n += p != nullptr;
  }
  return n;
}

// Slots by meaning, in core/optimizer.h's order, for every configuration
// that changes the slot count; each uses exactly StateSlots(p) arrays.
TEST(LaunchArgsTest, StateSlotsMapByMeaning) {
  float a[4], b[4], c[4];
  float* const state[kMaxStateSlots] = {a, b, c};

  OptimizerParams p;
  p.kind = Kind::kSgd;
  p.lr = 0.1f;
  kernels::UpdateState s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(NonNull(s), 0);
  p.momentum = 0.9f;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.momentum_buffer, a);

  for (Kind k : {Kind::kAdam, Kind::kAdamW}) {
    p = {};
    p.kind = k;
    p.lr = 1e-3f;
    s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
    EXPECT_EQ(NonNull(s), StateSlots(p));
    EXPECT_EQ(s.exp_avg, a);
    EXPECT_EQ(s.exp_avg_sq, b);
  }

  p = {};
  p.kind = Kind::kRmsprop;
  p.lr = 1e-2f;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.square_avg, a);
  p.centered = true;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.grad_avg, b);
  p.momentum = 0.9f;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.square_avg, a);
  EXPECT_EQ(s.momentum_buffer, b);
  EXPECT_EQ(s.grad_avg, c);
  p.centered = false;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.momentum_buffer, b);

  p = {};
  p.kind = Kind::kAdagrad;
  p.lr = 0.1f;
  s = UpdateStateFor(p, MakeOptimizerScalars(p, 1), state);
  EXPECT_EQ(NonNull(s), StateSlots(p));
  EXPECT_EQ(s.sum, a);
}

// The kernels run on the CPU's own scalars, field for field.
TEST(LaunchArgsTest, UpdateArgsAreTheCpuScalars) {
  for (Kind k : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kRmsprop, Kind::kAdagrad}) {
    OptimizerParams p;
    p.kind = k;
    p.lr = 0.01f;
    p.weight_decay = 0.02f;
    p.grad_scale = 0.5f;
    if (k == Kind::kSgd || k == Kind::kRmsprop) p.momentum = 0.9f;
    if (k == Kind::kAdagrad) p.lr_decay = 0.1f;
    ASSERT_TRUE(ValidateOptimizerParams(p).ok());
    const OptimizerScalars s = MakeOptimizerScalars(p, 3);
    const kernels::UpdateArgs a = UpdateArgsFor(p, s);
    EXPECT_EQ(static_cast<int>(a.kind), static_cast<int>(k));
    EXPECT_EQ(a.scale_grad, s.scale_grad);
    EXPECT_EQ(a.grad_scale, s.grad_scale);
    EXPECT_EQ(a.has_weight_decay, s.has_weight_decay);
    EXPECT_EQ(a.weight_decay, s.weight_decay);
    EXPECT_EQ(a.has_momentum, s.has_momentum);
    EXPECT_EQ(a.momentum, s.momentum);
    EXPECT_EQ(a.neg_lr, s.neg_lr);
    EXPECT_EQ(a.nesterov, s.nesterov);
    EXPECT_EQ(a.first_step, s.first_step);
    EXPECT_EQ(a.one_minus_dampening, s.one_minus_dampening);
    EXPECT_EQ(a.decay, s.decay);
    EXPECT_EQ(a.beta1, s.beta1);
    EXPECT_EQ(a.one_minus_beta1, s.one_minus_beta1);
    EXPECT_EQ(a.beta2, s.beta2);
    EXPECT_EQ(a.one_minus_beta2, s.one_minus_beta2);
    EXPECT_EQ(a.bc2_sqrt, s.bc2_sqrt);
    EXPECT_EQ(a.neg_step_size, s.neg_step_size);
    EXPECT_EQ(a.eps, s.eps);
    EXPECT_EQ(a.centered, s.centered);
    EXPECT_EQ(a.alpha, s.alpha);
    EXPECT_EQ(a.one_minus_alpha, s.one_minus_alpha);
    EXPECT_EQ(a.neg_clr, s.neg_clr);
  }
}

TEST(LaunchArgsTest, PackTableSkipsEmptySegmentsAndCountsOffsets) {
  float a[7], b[1], c[3];
  size_t total = 99;
  auto table = PackTable({{a, 7}, {b, 0}, {b, 1}, {c, 3}, {c, 0}}, &total);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(total, 11u);
  EXPECT_EQ(table[0].data, a);
  EXPECT_EQ(table[0].offset, 0u);
  EXPECT_EQ(table[1].data, b);
  EXPECT_EQ(table[1].offset, 7u);
  EXPECT_EQ(table[1].count, 1u);
  EXPECT_EQ(table[2].offset, 8u);
  EXPECT_EQ(table[2].count, 3u);
  EXPECT_TRUE(PackTable({}, &total).empty());
  EXPECT_EQ(total, 0u);
  EXPECT_TRUE(PackTable({{a, 0}}, &total).empty());
  EXPECT_EQ(total, 0u);
}

}  // namespace
}  // namespace tessel::gpu::internal
