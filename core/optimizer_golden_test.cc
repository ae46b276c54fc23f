// Golden trajectories recorded from real torch.optim 1.13 by
// tools/gen_optim_golden.py (core/testdata/optim_golden.json), replayed
// through ApplyUpdate: within a few ulps of torch (whose AVX2 kernels use
// FMAs), and bit for bit equal to torch's operation order without FMAs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/optimizer.h"
#include "core/optimizer_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;
using optimizer_testing::BitwiseEqual;
using optimizer_testing::Describe;
using optimizer_testing::RefScales;
using optimizer_testing::RefState;
using optimizer_testing::RefStateFrom;
using optimizer_testing::RefStep;
using optimizer_testing::ToDouble;
using optimizer_testing::ToleranceTracker;
using optimizer_testing::Trajectory;

std::string GoldenPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  std::string base = srcdir ? srcdir : ".";
  return absl::StrCat(base, "/", workspace ? workspace : "tessel",
                      "/core/testdata/optim_golden.json");
}

std::vector<float> FloatArray(const nlohmann::json& j) {
  std::vector<float> v;
  // JSON holds the float32 values printed as doubles, so the cast is exact.
  for (const auto& x : j) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

OptimizerParams ParamsFromGolden(const nlohmann::json& c) {
  OptimizerParams p;
  const std::string kind = c.at("kind").get<std::string>();
  if (kind == "sgd") {
    p.kind = Kind::kSgd;
  } else if (kind == "adam") {
    p.kind = Kind::kAdam;
  } else if (kind == "adamw") {
    p.kind = Kind::kAdamW;
  } else if (kind == "rmsprop") {
    p.kind = Kind::kRmsprop;
  } else {
    EXPECT_EQ(kind, "adagrad");
    p.kind = Kind::kAdagrad;
  }
  auto f = [&c](const char* key) { return static_cast<float>(c.at(key).get<double>()); };
  p.lr = f("lr");
  p.momentum = f("momentum");
  p.dampening = f("dampening");
  p.nesterov = c.at("nesterov").get<bool>();
  p.weight_decay = f("weight_decay");
  p.beta1 = f("beta1");
  p.beta2 = f("beta2");
  p.eps = f("eps");
  p.alpha = f("alpha");
  p.centered = c.at("centered").get<bool>();
  p.lr_decay = f("lr_decay");
  p.initial_accumulator_value = f("initial_accumulator_value");
  return p;
}

struct GoldenCase {
  std::string name;
  OptimizerParams params;
  std::vector<float> params0;
  std::vector<std::vector<float>> grads;                    // [step]
  std::vector<std::vector<float>> want_params;              // [step], after that step
  std::vector<std::vector<std::vector<float>>> want_state;  // [step][slot]
  // torch's operation order without FMAs (tessel's kernels), same layout.
  std::vector<std::vector<float>> unfused_params;
  std::vector<std::vector<std::vector<float>>> unfused_state;
};

std::vector<GoldenCase> LoadGolden() {
  std::ifstream in(GoldenPath());
  EXPECT_TRUE(in.good()) << "cannot open " << GoldenPath()
                         << "; regenerate with /usr/bin/python3 tools/gen_optim_golden.py";
  if (!in.good()) return {};
  const nlohmann::json doc = nlohmann::json::parse(in);
  const size_t n = doc.at("num_elems").get<size_t>();
  const size_t steps = doc.at("num_steps").get<size_t>();
  std::vector<GoldenCase> cases;
  for (const auto& c : doc.at("cases")) {
    GoldenCase g;
    g.name = c.at("name").get<std::string>();
    g.params = ParamsFromGolden(c);
    g.params0 = FloatArray(c.at("params0"));
    for (size_t s = 0; s < steps; ++s) {
      g.grads.push_back(FloatArray(c.at("grads").at(s)));
      g.want_params.push_back(FloatArray(c.at("params").at(s)));
      g.want_state.emplace_back();
      for (const auto& slot : c.at("state").at(s)) g.want_state.back().push_back(FloatArray(slot));
      g.unfused_params.push_back(FloatArray(c.at("unfused_params").at(s)));
      g.unfused_state.emplace_back();
      for (const auto& slot : c.at("unfused_state").at(s)) {
        g.unfused_state.back().push_back(FloatArray(slot));
      }
      EXPECT_EQ(g.unfused_state.back().size(), g.want_state.back().size()) << g.name;
      EXPECT_EQ(g.grads.back().size(), n) << g.name;
      EXPECT_EQ(g.want_params.back().size(), n) << g.name;
      EXPECT_EQ(g.want_state.back().size(), static_cast<size_t>(StateSlots(g.params))) << g.name;
      for (const auto& slot : g.want_state.back()) EXPECT_EQ(slot.size(), n) << g.name;
    }
    EXPECT_EQ(g.params0.size(), n) << g.name;
    cases.push_back(std::move(g));
  }
  return cases;
}

// Compares a run's params and state after step `s` (0-based) with torch's.
void CheckAgainstGolden(const GoldenCase& g, size_t s, const Trajectory& run,
                        const RefScales& scales, ToleranceTracker& tol) {
  for (size_t i = 0; i < run.params.size(); ++i) {
    tol.Check(run.params[i], g.want_params[s][i],
              absl::StrFormat("param after step %d, i %d", s + 1, i), scales.param[i]);
    for (size_t k = 0; k < run.state.size(); ++k) {
      tol.Check(run.state[k][i], g.want_state[s][k][i],
                absl::StrFormat("state slot %d after step %d, i %d", k, s + 1, i),
                scales.slot[k][i]);
    }
  }
}

// Term scales of step s, from a reference step started at torch's state.
RefScales GoldenScales(const GoldenCase& g, size_t s) {
  std::vector<double> theta = ToDouble(s == 0 ? g.params0 : g.want_params[s - 1]);
  RefState st = s == 0 ? RefState() : RefStateFrom(g.want_state[s - 1]);
  RefScales scales;
  RefStep(g.params, s + 1, theta, ToDouble(g.grads[s]), st, &scales);
  return scales;
}

// Torch's AVX2 kernels fuse `a + alpha * b` (and addcmul) into FMAs and ours
// never do, so some elements differ by an ulp or so. Tolerance: 1e-6 relative,
// plus a few float ulps of the term scale for entries that cancel to near 0.

// One step at a time, each started from torch's own params and state.
TEST(OptimizerGoldenTest, EachStepFromTorchStateMatchesTorch) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GE(cases.size(), 12u);
  for (const GoldenCase& g : cases) {
    SCOPED_TRACE(g.name);
    ASSERT_TRUE(ValidateOptimizerParams(g.params).ok()) << Describe(g.params);
    ToleranceTracker tol(1e-6, 0x1p-22);
    for (size_t s = 0; s < g.grads.size(); ++s) {
      Trajectory run(g.params, s == 0 ? g.params0 : g.want_params[s - 1]);
      if (s > 0) run.state = g.want_state[s - 1];
      run.Step(s + 1, g.grads[s]);
      CheckAgainstGolden(g, s, run, GoldenScales(g, s), tol);
    }
    EXPECT_LE(tol.worst, 1.0) << tol.where;
  }
}

// The whole trajectory free-running from params0, as a training job would.
// Differences from torch's FMAs accumulate over the steps, hence 2^-20 (16
// ulps) of the term scale rather than 2^-22.
TEST(OptimizerGoldenTest, TrajectoryMatchesTorch) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GE(cases.size(), 12u);
  for (const GoldenCase& g : cases) {
    SCOPED_TRACE(g.name);
    Trajectory run(g.params, g.params0);
    ToleranceTracker tol(1e-6, 0x1p-20);
    int bitwise_equal = 0, total = 0;
    for (size_t s = 0; s < g.grads.size(); ++s) {
      run.Step(s + 1, g.grads[s]);
      CheckAgainstGolden(g, s, run, GoldenScales(g, s), tol);
      for (size_t i = 0; i < run.params.size(); ++i) {
        bitwise_equal += run.params[i] == g.want_params[s][i];
        ++total;
      }
    }
    EXPECT_LE(tol.worst, 1.0) << tol.where;
    std::printf(
        "[ info ] golden %s: %d/%d params bitwise equal to torch, worst error %.3g of "
        "tolerance\n",
        g.name.c_str(), bitwise_equal, total, tol.worst);
  }
}

// tools/gen_optim_golden.py replays torch's operation order in NumPy and
// checks it against torch bit for bit (with torch's FMAs); the same order
// without FMAs is what our kernels compute, so they must match it exactly.
TEST(OptimizerGoldenTest, TrajectoryBitwiseEqualsTorchOrderWithoutFma) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GE(cases.size(), 12u);
  for (const GoldenCase& g : cases) {
    SCOPED_TRACE(g.name);
    Trajectory run(g.params, g.params0);
    for (size_t s = 0; s < g.grads.size(); ++s) {
      run.Step(s + 1, g.grads[s]);
      EXPECT_TRUE(BitwiseEqual(run.params, g.unfused_params[s])) << "params after step " << s + 1;
      ASSERT_EQ(run.state.size(), g.unfused_state[s].size());
      for (size_t k = 0; k < run.state.size(); ++k) {
        EXPECT_TRUE(BitwiseEqual(run.state[k], g.unfused_state[s][k]))
            << "slot " << k << " after step " << s + 1;
      }
    }
  }
}

TEST(OptimizerGoldenTest, CoversEveryKindAndRmspropSlotLayout) {
  const std::vector<GoldenCase> cases = LoadGolden();
  std::vector<int> per_kind(5, 0);
  int rmsprop_three_slots = 0;
  for (const GoldenCase& g : cases) {
    ++per_kind[static_cast<int>(g.params.kind)];
    rmsprop_three_slots += g.params.kind == Kind::kRmsprop && StateSlots(g.params) == 3;
  }
  for (int k = 0; k < 5; ++k) {
    EXPECT_GE(per_kind[k], 1) << OptimizerKindName(static_cast<Kind>(k));
  }
  EXPECT_GE(rmsprop_three_slots, 1);
}

}  // namespace
}  // namespace tessel
