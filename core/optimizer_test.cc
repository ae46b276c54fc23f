#include "core/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

// ---------------------------------------------------------------------------
// Double-precision reference, written from the algorithms in the torch.optim
// documentation (not from the kernels): SGD, Adam with L2 weight decay, AdamW
// with decoupled decay, bias-corrected moments m_hat = m / (1 - beta1^t) and
// v_hat = v / (1 - beta2^t).

struct RefState {
  std::vector<double> slot0;  // SGD momentum buffer / Adam exp_avg
  std::vector<double> slot1;  // Adam exp_avg_sq
};

// Alongside each value the reference tracks its "term scale": the sum of the
// magnitudes of everything added up to produce it (|a| + |b| for a + b,
// |c| * scale(x) for c * x, ...). A float computation of the same formula is
// then off by at most a few ulps of that scale, even where the value itself
// cancels to nearly zero; tests use it as the absolute part of the tolerance.
struct RefScales {
  std::vector<double> param, slot0, slot1;
};

void RefStep(const OptimizerParams& p, int64_t t, std::vector<double>& theta,
             const std::vector<double>& grad, RefState& st, RefScales* scales = nullptr) {
  const double lr = p.lr, mu = p.momentum, tau = p.dampening, lambda = p.weight_decay;
  const double b1 = p.beta1, b2 = p.beta2, eps = p.eps;
  const size_t n = theta.size();
  st.slot0.resize(n, 0.0);
  st.slot1.resize(n, 0.0);
  RefScales local;
  if (scales == nullptr) scales = &local;
  scales->param.assign(n, 0.0);
  scales->slot0.assign(n, 0.0);
  scales->slot1.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double g = grad[i];
    double g_scale = std::fabs(g);
    if (p.kind == Kind::kSgd) {
      // g <- g + lambda * theta; b <- mu * b + (1 - tau) * g (b <- g at t = 1);
      // g <- g + mu * b (nesterov) or b; theta <- theta - lr * g.
      g += lambda * theta[i];
      g_scale += lambda * std::fabs(theta[i]);
      if (mu != 0) {
        double& b = st.slot0[i];
        double& b_scale = scales->slot0[i];
        b_scale = t > 1 ? mu * std::fabs(b) + std::fabs(1 - tau) * g_scale : g_scale;
        b = t > 1 ? mu * b + (1 - tau) * g : g;
        g_scale = p.nesterov ? g_scale + mu * b_scale : b_scale;
        g = p.nesterov ? g + mu * b : b;
      }
      scales->param[i] = std::fabs(theta[i]) + lr * g_scale;
      theta[i] -= lr * g;
      continue;
    }
    if (p.kind == Kind::kAdamW) {
      theta[i] -= lr * lambda * theta[i];  // theta <- theta - lr * lambda * theta
    } else {
      g += lambda * theta[i];  // g <- g + lambda * theta
      g_scale += lambda * std::fabs(theta[i]);
    }
    double& m = st.slot0[i];
    double& v = st.slot1[i];
    scales->slot0[i] = b1 * std::fabs(m) + (1 - b1) * g_scale;
    scales->slot1[i] = b2 * std::fabs(v) + (1 - b2) * g_scale * g_scale;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(t));
    const double m_hat = m / bc1;
    const double v_hat = v / bc2;
    const double denom = std::sqrt(v_hat) + eps;
    // The update's error: its relative rounding plus m's cancellation error.
    scales->param[i] = std::fabs(theta[i]) + 2 * lr * (scales->slot0[i] / bc1) / denom;
    theta[i] -= lr * m_hat / denom;
  }
}

// ---------------------------------------------------------------------------
// Helpers.

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Parameters and optimizer state of one run, stepped with ApplyUpdate.
struct Trajectory {
  OptimizerParams p;
  std::vector<float> params;
  std::vector<std::vector<float>> state;

  Trajectory(const OptimizerParams& p_in, std::vector<float> params_in)
      : p(p_in), params(std::move(params_in)) {
    state.assign(StateSlots(p), std::vector<float>(params.size(), 0.0f));
  }
  std::vector<float*> StatePtrs() {
    std::vector<float*> ptrs;
    for (auto& s : state) ptrs.push_back(s.data());
    return ptrs;
  }
  void Step(int64_t step, const std::vector<float>& grad) {
    std::vector<float*> ptrs = StatePtrs();
    ApplyUpdate(p, step, params.data(), grad.data(), ptrs.data(), params.size());
  }
};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

std::string Describe(const OptimizerParams& p) {
  return absl::StrFormat(
      "%s lr=%g momentum=%g dampening=%g nesterov=%d wd=%g beta1=%g beta2=%g eps=%g",
      OptimizerKindName(p.kind), p.lr, p.momentum, p.dampening, p.nesterov, p.weight_decay, p.beta1,
      p.beta2, p.eps);
}

// Largest |a - b| / (rtol * |b| + atol * scale) seen; <= 1 means within
// tolerance. `scale` is b's term scale (see RefScales).
struct ToleranceTracker {
  ToleranceTracker(double rtol_in, double atol_in) : rtol(rtol_in), atol(atol_in) {}
  double rtol, atol;
  double worst = 0;
  std::string where;
  void Check(double actual, double expected, const std::string& what, double scale = 1.0) {
    const double ratio = std::fabs(actual - expected) / (rtol * std::fabs(expected) + atol * scale);
    if (!(ratio <= worst)) {  // also records NaN
      worst = ratio;
      where = absl::StrFormat("%s: got %.9g, want %.9g", what, actual, expected);
    }
  }
};

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// Gradient entries spread over magnitudes 1e-3..1e1 with random signs.
std::vector<float> RandomGrad(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> exponent(-3.0, 1.0);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> g(n);
  for (float& x : g) {
    x = static_cast<float>((negative(rng) ? -1.0 : 1.0) * std::pow(10.0, exponent(rng)));
  }
  return g;
}

// ---------------------------------------------------------------------------
// Configurations: every kind and option combination (SGD momentum/dampening/
// nesterov/weight decay; Adam and AdamW with and without weight decay).

struct Config {
  std::string name;
  OptimizerParams params;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

std::vector<Config> AllConfigs() {
  std::vector<Config> configs;
  for (float momentum : {0.0f, 0.9f}) {
    for (float dampening : {0.0f, 0.3f}) {
      for (bool nesterov : {false, true}) {
        for (float wd : {0.0f, 0.05f}) {
          OptimizerParams p;
          p.kind = Kind::kSgd;
          p.lr = 0.05f;
          p.momentum = momentum;
          p.dampening = dampening;
          p.nesterov = nesterov;
          p.weight_decay = wd;
          if (!ValidateOptimizerParams(p).ok()) continue;  // nesterov needs momentum, no damping
          configs.push_back({absl::StrFormat("Sgd_m%d_d%d_n%d_wd%d", momentum != 0, dampening != 0,
                                             nesterov, wd != 0),
                             p});
        }
      }
    }
  }
  for (Kind kind : {Kind::kAdam, Kind::kAdamW}) {
    for (float wd : {0.0f, 0.05f}) {
      OptimizerParams p;
      p.kind = kind;
      p.lr = 0.01f;
      p.weight_decay = wd;
      configs.push_back({absl::StrFormat("%s_wd%d", OptimizerKindName(kind), wd != 0), p});
    }
  }
  return configs;
}

// Redraws the continuous hyperparameters of `base`, keeping its structure
// (kind, which of momentum/dampening/nesterov/weight decay are on).
OptimizerParams Perturb(const OptimizerParams& base, std::mt19937_64& rng) {
  auto uniform = [&rng](double lo, double hi) {
    return static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(rng));
  };
  auto log_uniform = [&rng](double lo, double hi) {
    return static_cast<float>(
        std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng)));
  };
  OptimizerParams p = base;
  p.lr = log_uniform(1e-4, 0.5);
  if (p.momentum != 0) p.momentum = uniform(0.1, 0.99);
  if (p.dampening != 0) p.dampening = uniform(0.05, 0.9);
  if (p.weight_decay != 0) p.weight_decay = log_uniform(1e-4, 0.2);
  if (p.kind != Kind::kSgd) {
    p.beta1 = uniform(0.0, 0.99);
    p.beta2 = uniform(0.9, 0.99999);
    p.eps = log_uniform(1e-10, 1e-4);
  }
  return p;
}

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
        RefState ref_state;
        RefScales scales;
        if (run.state.size() > 0) ref_state.slot0 = ToDouble(run.state[0]);
        if (run.state.size() > 1) ref_state.slot1 = ToDouble(run.state[1]);
        RefStep(p, step, ref_params, ToDouble(grad), ref_state, &scales);
        run.Step(step, grad);
        for (size_t i = 0; i < n; ++i) {
          const std::string where =
              absl::StrFormat("%s n=%d step=%d i=%d", Describe(p), n, step, i);
          params_tol.Check(run.params[i], ref_params[i], "param " + where, scales.param[i]);
          if (run.state.size() > 0) {
            state_tol.Check(run.state[0][i], ref_state.slot0[i], "slot0 " + where, scales.slot0[i]);
          }
          if (run.state.size() > 1) {
            state_tol.Check(run.state[1][i], ref_state.slot1[i], "slot1 " + where, scales.slot1[i]);
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

// (c) The fused path is bitwise the unfused one, across block boundaries.
TEST_P(OptimizerConfigTest, ReduceAndApplyBitwiseEqualsReduceMeanThenApply) {
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

INSTANTIATE_TEST_SUITE_P(AllKinds, OptimizerConfigTest, testing::ValuesIn(AllConfigs()),
                         [](const testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

TEST(OptimizerConfigs, CoverEveryValidCombination) {
  // SGD without momentum: dampening x wd = 4 (nesterov needs momentum).
  // SGD with momentum: (dampening x nesterov, minus nesterov with dampening)
  // x wd = 6. Adam and AdamW x wd = 4.
  EXPECT_EQ(AllConfigs().size(), 14u);
}

// ---------------------------------------------------------------------------
// (b) Golden trajectories recorded from real torch.optim by
// tools/gen_optim_golden.py.

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
  p.kind = kind == "sgd" ? Kind::kSgd : kind == "adam" ? Kind::kAdam : Kind::kAdamW;
  EXPECT_TRUE(kind == "sgd" || kind == "adam" || kind == "adamw") << kind;
  auto f = [&c](const char* key) { return static_cast<float>(c.at(key).get<double>()); };
  p.lr = f("lr");
  p.momentum = f("momentum");
  p.dampening = f("dampening");
  p.nesterov = c.at("nesterov").get<bool>();
  p.weight_decay = f("weight_decay");
  p.beta1 = f("beta1");
  p.beta2 = f("beta2");
  p.eps = f("eps");
  return p;
}

struct GoldenCase {
  std::string name;
  OptimizerParams params;
  std::vector<float> params0;
  std::vector<std::vector<float>> grads;                    // [step]
  std::vector<std::vector<float>> want_params;              // [step], after that step
  std::vector<std::vector<std::vector<float>>> want_state;  // [step][slot]
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
                k == 0 ? scales.slot0[i] : scales.slot1[i]);
    }
  }
}

// Term scales of step s, from a reference step started at torch's state.
RefScales GoldenScales(const GoldenCase& g, size_t s) {
  std::vector<double> theta = ToDouble(s == 0 ? g.params0 : g.want_params[s - 1]);
  RefState st;
  if (s > 0 && !g.want_state[s - 1].empty()) st.slot0 = ToDouble(g.want_state[s - 1][0]);
  if (s > 0 && g.want_state[s - 1].size() > 1) st.slot1 = ToDouble(g.want_state[s - 1][1]);
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
  ASSERT_GE(cases.size(), 4u);
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
  ASSERT_GE(cases.size(), 4u);
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

TEST(OptimizerTest, EmptyInputIsANoOp) {
  for (const Config& c : AllConfigs()) {
    ApplyUpdate(c.params, 1, nullptr, nullptr, nullptr, 0);
    ReduceAndApply(c.params, 1, nullptr, nullptr, 2, nullptr, 0);
  }
  ReduceMean(nullptr, 3, nullptr, 0);
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
}

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

// ---------------------------------------------------------------------------
// Validation.

OptimizerParams Sgd() { return OptimizerParams(); }
OptimizerParams Adam(Kind kind = Kind::kAdam) {
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
}

TEST(ValidateOptimizerParamsTest, RejectsBadValuesWithClearMessages) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  for (Kind kind : {Kind::kSgd, Kind::kAdam, Kind::kAdamW}) {
    OptimizerParams base = kind == Kind::kSgd ? Sgd() : Adam(kind);
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
    ExpectRejected(p, "SGD-only");
    p = Adam(kind);
    p.nesterov = true;
    ExpectRejected(p, "SGD-only");
  }
  p = Sgd();
  p.kind = static_cast<Kind>(42);
  ExpectRejected(p, "optimizer kind 42");
}

TEST(ValidateOptimizerParamsTest, MessageNamesOptimizerValueAndRule) {
  OptimizerParams p = Adam();
  p.beta2 = 1.0f;
  EXPECT_EQ(ValidateOptimizerParams(p).message(),
            "invalid Adam optimizer parameter beta2 = 1: must be in [0, 1)");
}

TEST(OptimizerDeathTest, StepBelowOneAborts) {
  OptimizerParams p;
  float x = 1.0f, g = 1.0f;
  EXPECT_DEATH(ApplyUpdate(p, 0, &x, &g, nullptr, 1), "step must be >= 1");
  const float* srcs[] = {&g};
  EXPECT_DEATH(ReduceAndApply(p, 1, &x, srcs, 0, nullptr, 1), "w must be >= 1");
}

}  // namespace
}  // namespace tessel
