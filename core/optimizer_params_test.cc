// OptimizerParams (core/optimizer_params.h): validation with torch's
// conditions and clear messages, state slots, initial state, kind names.
#include "core/optimizer_params.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/optimizer_testing.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;
using optimizer_testing::AllConfigs;
using optimizer_testing::Config;
using optimizer_testing::Describe;

TEST(OptimizerTest, InitStateWritesTorchInitialValues) {
  for (const Config& c : AllConfigs()) {
    SCOPED_TRACE(c.name);
    const int slots = StateSlots(c.params);
    std::vector<std::vector<float>> state(slots, std::vector<float>(37, -3.0f));
    std::vector<float*> ptrs;
    for (auto& s : state) ptrs.push_back(s.data());
    InitState(c.params, ptrs.data(), 37);
    for (int k = 0; k < slots; ++k) {
      const float want = c.params.kind == Kind::kAdagrad ? c.params.initial_accumulator_value : 0;
      EXPECT_EQ(state[k], std::vector<float>(37, want)) << "slot " << k;
    }
  }
}

TEST(OptimizerTest, StateSlots) {
  OptimizerParams p;
  EXPECT_EQ(StateSlots(p), 0);
  p.momentum = 0.9f;
  EXPECT_EQ(StateSlots(p), 1);
  p = OptimizerParams();
  p.kind = Kind::kAdam;
  EXPECT_EQ(StateSlots(p), 2);
  p.kind = Kind::kAdamW;
  EXPECT_EQ(StateSlots(p), 2);
  p = OptimizerParams();
  p.kind = Kind::kRmsprop;
  EXPECT_EQ(StateSlots(p), 1);  // square_avg
  p.momentum = 0.9f;
  EXPECT_EQ(StateSlots(p), 2);  // + momentum_buffer
  p.centered = true;
  EXPECT_EQ(StateSlots(p), 3);  // + grad_avg
  EXPECT_EQ(StateSlots(p), kMaxStateSlots);
  p.momentum = 0;
  EXPECT_EQ(StateSlots(p), 2);  // square_avg, grad_avg
  p = OptimizerParams();
  p.kind = Kind::kAdagrad;
  EXPECT_EQ(StateSlots(p), 1);  // sum
}

TEST(OptimizerTest, KindNames) {
  EXPECT_STREQ(OptimizerKindName(Kind::kSgd), "SGD");
  EXPECT_STREQ(OptimizerKindName(Kind::kAdam), "Adam");
  EXPECT_STREQ(OptimizerKindName(Kind::kAdamW), "AdamW");
  EXPECT_STREQ(OptimizerKindName(Kind::kRmsprop), "RMSprop");
  EXPECT_STREQ(OptimizerKindName(Kind::kAdagrad), "Adagrad");
}

// ---------------------------------------------------------------------------
// Validation.

OptimizerParams Sgd() { return OptimizerParams(); }
OptimizerParams Adam(Kind kind = Kind::kAdam) {
  OptimizerParams p;
  p.kind = kind;
  return p;
}
OptimizerParams Rmsprop() {
  OptimizerParams p;
  p.kind = Kind::kRmsprop;
  return p;
}
OptimizerParams Adagrad() {
  OptimizerParams p;
  p.kind = Kind::kAdagrad;
  p.eps = 1e-10f;
  return p;
}
OptimizerParams Default(Kind kind) {
  OptimizerParams p;
  p.kind = kind;
  return p;
}

void ExpectRejected(const OptimizerParams& p, const std::string& needle) {
  const absl::Status s = ValidateOptimizerParams(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << Describe(p) << ": " << s;
  EXPECT_NE(s.message().find(needle), absl::string_view::npos)
      << "message \"" << s.message() << "\" does not mention \"" << needle << "\"";
}

TEST(ValidateOptimizerParamsTest, AcceptsDefaultsAndTypicalValues) {
  EXPECT_TRUE(ValidateOptimizerParams(Sgd()).ok());
  EXPECT_TRUE(ValidateOptimizerParams(Adam()).ok());
  EXPECT_TRUE(ValidateOptimizerParams(Adam(Kind::kAdamW)).ok());
  for (const Config& c : AllConfigs())
    EXPECT_TRUE(ValidateOptimizerParams(c.params).ok()) << c.name;
  OptimizerParams p = Adam();
  p.lr = 0;  // torch allows lr == 0, eps == 0 and beta == 0
  p.eps = 0;
  p.beta1 = 0;
  p.beta2 = 0;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  p = Sgd();
  p.dampening = -0.5f;  // torch does not check dampening either
  p.momentum = 0.9f;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  // Every kind with all its untouched defaults (including Adagrad's eps).
  for (Kind kind : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kRmsprop, Kind::kAdagrad}) {
    EXPECT_TRUE(ValidateOptimizerParams(Default(kind)).ok()) << OptimizerKindName(kind);
  }
  // RMSprop's range ends: torch allows alpha 0 and 1 (and beyond), eps 0.
  p = Rmsprop();
  p.alpha = 0;
  p.eps = 0;
  p.lr = 0;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  p.alpha = 1;
  p.centered = true;
  p.momentum = 0.5f;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  p = Adagrad();
  p.eps = 0;
  p.lr_decay = 0;
  p.initial_accumulator_value = 0;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
  p.lr_decay = 10;
  p.initial_accumulator_value = 5;
  p.weight_decay = 0.5f;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
}

TEST(ValidateOptimizerParamsTest, RejectsBadValuesWithClearMessages) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  for (Kind kind : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kRmsprop, Kind::kAdagrad}) {
    OptimizerParams base = Default(kind);
    for (float bad : {-1e-3f, nan, inf}) {
      OptimizerParams p = base;
      p.lr = bad;
      ExpectRejected(p, "lr");
      p = base;
      p.weight_decay = bad;
      ExpectRejected(p, "weight_decay");
    }
  }
  for (float bad : {-0.1f, nan, inf}) {
    OptimizerParams p = Sgd();
    p.momentum = bad;
    ExpectRejected(p, "momentum");
  }
  OptimizerParams p = Sgd();
  p.dampening = nan;
  ExpectRejected(p, "dampening");

  p = Sgd();
  p.nesterov = true;  // momentum 0
  ExpectRejected(p, "nesterov momentum requires momentum > 0 and dampening == 0");
  p.momentum = 0.9f;
  p.dampening = 0.1f;
  ExpectRejected(p, "nesterov");
  p.dampening = 0;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());

  for (Kind kind : {Kind::kAdam, Kind::kAdamW}) {
    for (float bad : {-1e-8f, nan, inf}) {
      p = Adam(kind);
      p.eps = bad;
      ExpectRejected(p, "eps");
    }
    for (float bad : {-0.1f, 1.0f, 1.5f, nan}) {
      p = Adam(kind);
      p.beta1 = bad;
      ExpectRejected(p, "beta1");
      p = Adam(kind);
      p.beta2 = bad;
      ExpectRejected(p, "beta2");
    }
    p = Adam(kind);
    p.momentum = 0.9f;
    ExpectRejected(p, "momentum = 0.9 does not apply to Adam");
    p = Adam(kind);
    p.nesterov = true;
    ExpectRejected(p, "nesterov = true does not apply");
  }
  p = Sgd();
  p.kind = static_cast<Kind>(42);
  ExpectRejected(p, "optimizer kind 42");
}

TEST(ValidateOptimizerParamsTest, GradScaleMustBeFiniteAndPositive) {
  for (Kind kind : {Kind::kSgd, Kind::kAdam, Kind::kAdamW, Kind::kRmsprop, Kind::kAdagrad}) {
    OptimizerParams p;
    p.kind = kind;
    p.grad_scale = 1.0f / 65536.0f;
    EXPECT_TRUE(ValidateOptimizerParams(p).ok()) << OptimizerKindName(kind);
    for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      p.grad_scale = bad;
      absl::Status s = ValidateOptimizerParams(p);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find("grad_scale"), std::string::npos) << s;
    }
  }
}

TEST(ValidateOptimizerParamsTest, RejectsBadRmspropAndAdagradValues) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  for (float bad : {-1e-8f, nan, inf}) {
    OptimizerParams p = Rmsprop();
    p.eps = bad;
    ExpectRejected(p, "eps");
    p = Rmsprop();
    p.momentum = bad;
    ExpectRejected(p, "momentum");
    p = Adagrad();
    p.eps = bad;
    ExpectRejected(p, "eps");
    p = Adagrad();
    p.lr_decay = bad;
    ExpectRejected(p, "lr_decay");
    p = Adagrad();
    p.initial_accumulator_value = bad;
    ExpectRejected(p, "initial_accumulator_value");
  }
  for (float bad : {-0.1f, 1.0001f, 2.0f, nan, inf}) {
    OptimizerParams p = Rmsprop();
    p.alpha = bad;
    ExpectRejected(p, "alpha");
  }
  OptimizerParams p = Rmsprop();
  p.centered = true;
  p.alpha = 0;
  ExpectRejected(p, "centered RMSprop needs alpha > 0");
}

TEST(ValidateOptimizerParamsTest, RejectsFieldsTheKindDoesNotUse) {
  // SGD, Adam, AdamW: the RMSprop and Adagrad fields.
  for (Kind kind : {Kind::kSgd, Kind::kAdam, Kind::kAdamW}) {
    OptimizerParams p = Default(kind);
    p.alpha = 0.9f;
    ExpectRejected(p, "alpha = 0.9 does not apply");
    p = Default(kind);
    p.centered = true;
    ExpectRejected(p, "centered = true does not apply");
    p = Default(kind);
    p.lr_decay = 0.1f;
    ExpectRejected(p, "lr_decay = 0.1 does not apply");
    p = Default(kind);
    p.initial_accumulator_value = 0.1f;
    ExpectRejected(p, "initial_accumulator_value = 0.1 does not apply");
    p = Default(kind);
    p.alpha = std::nanf("");
    ExpectRejected(p, "alpha = nan");
  }
  // RMSprop: SGD's dampening/nesterov, Adam's betas, Adagrad's fields.
  OptimizerParams p = Rmsprop();
  p.dampening = 0.1f;
  ExpectRejected(p, "dampening = 0.1 does not apply to RMSprop");
  p = Rmsprop();
  p.momentum = 0.9f;
  p.nesterov = true;
  ExpectRejected(p, "nesterov = true does not apply to RMSprop");
  p = Rmsprop();
  p.beta2 = 0.9f;
  ExpectRejected(p, "RMSprop's smoothing constant is alpha");
  p = Rmsprop();
  p.lr_decay = 0.1f;
  ExpectRejected(p, "lr_decay");
  p = Rmsprop();
  p.initial_accumulator_value = 0.1f;
  ExpectRejected(p, "initial_accumulator_value");
  // Adagrad: momentum, dampening, nesterov, betas, alpha, centered.
  p = Adagrad();
  p.momentum = 0.9f;
  ExpectRejected(p, "momentum = 0.9 does not apply to Adagrad");
  p = Adagrad();
  p.dampening = 0.5f;
  ExpectRejected(p, "dampening");
  p = Adagrad();
  p.nesterov = true;
  ExpectRejected(p, "nesterov");
  p = Adagrad();
  p.beta1 = 0.5f;
  ExpectRejected(p, "beta1 = 0.5 does not apply to Adagrad");
  p = Adagrad();
  p.beta2 = 0.5f;
  ExpectRejected(p, "beta2");
  p = Adagrad();
  p.alpha = 0.5f;
  ExpectRejected(p, "alpha");
  p = Adagrad();
  p.centered = true;
  ExpectRejected(p, "centered");
  // SGD keeps accepting any beta1/beta2/eps, as it always has.
  p = Sgd();
  p.beta1 = 0;
  p.beta2 = 0;
  p.eps = 0;
  EXPECT_TRUE(ValidateOptimizerParams(p).ok());
}

TEST(ValidateOptimizerParamsTest, UnusedFieldsMessageListsThemWithDefaults) {
  OptimizerParams p = Adam(Kind::kAdamW);
  p.momentum = 0.9f;
  p.lr_decay = 0.5f;
  EXPECT_EQ(ValidateOptimizerParams(p).message(),
            "invalid AdamW optimizer parameters: momentum = 0.9, lr_decay = 0.5 do not apply to "
            "AdamW; leave them at their defaults (momentum = 0, lr_decay = 0); AdamW's momentum "
            "is beta1");
  p = Adagrad();
  p.centered = true;
  EXPECT_EQ(ValidateOptimizerParams(p).message(),
            "invalid Adagrad optimizer parameters: centered = true does not apply to Adagrad; "
            "leave it at its default (centered = false)");
}

TEST(ValidateOptimizerParamsTest, MessageNamesOptimizerValueAndRule) {
  OptimizerParams p = Adam();
  p.beta2 = 1.0f;
  EXPECT_EQ(ValidateOptimizerParams(p).message(),
            "invalid Adam optimizer parameter beta2 = 1: must be in [0, 1)");
}

}  // namespace
}  // namespace tessel
