#include "core/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
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

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// ---------------------------------------------------------------------------
// Double-precision reference, written from the algorithms in the torch.optim
// documentation (not from the kernels): SGD, Adam with L2 weight decay, AdamW
// with decoupled decay, bias-corrected moments m_hat = m / (1 - beta1^t) and
// v_hat = v / (1 - beta2^t); RMSprop (plain or centered, with or without
// momentum); Adagrad with learning-rate decay.
//
// State slots follow core/optimizer.h: SGD [momentum_buffer]; Adam/AdamW
// [exp_avg, exp_avg_sq]; RMSprop [square_avg, momentum_buffer if momentum > 0,
// grad_avg if centered]; Adagrad [sum].

struct RefState {
  // Slots the caller leaves empty start at torch's initial value (Adagrad's
  // sum: initial_accumulator_value; everything else 0).
  std::array<std::vector<double>, kMaxStateSlots> slot;
};

// Alongside each value the reference tracks its "term scale": the sum of the
// magnitudes of everything added up to produce it (|a| + |b| for a + b,
// |c| * scale(x) for c * x, ...). A float computation of the same formula is
// then off by at most a few ulps of that scale, even where the value itself
// cancels to nearly zero; tests use it as the absolute part of the tolerance.
struct RefScales {
  std::vector<double> param;
  std::array<std::vector<double>, kMaxStateSlots> slot;
};

// Term scale of sqrt(x) + eps, given x's term scale: sqrt turns an error dx
// into dx / (2 sqrt(x)) (at most sqrt(dx) near 0).
double DenomScale(double x, double x_scale, double eps) {
  const double root = std::sqrt(std::max(x, 0.0));
  return root + eps + (root > 0 ? x_scale / (2 * root) : std::sqrt(x_scale));
}

// Term scale of g / d from those of g and d: relative errors add up.
double QuotientScale(double g, double g_scale, double d, double d_scale) {
  return g_scale / d + std::fabs(g) * d_scale / (d * d);
}

void RefStep(const OptimizerParams& p, int64_t t, std::vector<double>& theta,
             const std::vector<double>& grad, RefState& st, RefScales* scales = nullptr) {
  const double lr = p.lr, mu = p.momentum, tau = p.dampening, lambda = p.weight_decay;
  const double b1 = p.beta1, b2 = p.beta2, eps = p.eps;
  const double alpha = p.alpha, eta = p.lr_decay;
  const size_t n = theta.size();
  for (int k = 0; k < kMaxStateSlots; ++k) {
    const bool sum = p.kind == Kind::kAdagrad && k == 0;
    st.slot[k].resize(n, sum ? p.initial_accumulator_value : 0.0);
  }
  RefScales local;
  if (scales == nullptr) scales = &local;
  scales->param.assign(n, 0.0);
  for (auto& slot : scales->slot) slot.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double g = grad[i];
    double g_scale = std::fabs(g);
    if (p.kind == Kind::kSgd) {
      // g <- g + lambda * theta; b <- mu * b + (1 - tau) * g (b <- g at t = 1);
      // g <- g + mu * b (nesterov) or b; theta <- theta - lr * g.
      g += lambda * theta[i];
      g_scale += lambda * std::fabs(theta[i]);
      if (mu != 0) {
        double& b = st.slot[0][i];
        double& b_scale = scales->slot[0][i];
        b_scale = t > 1 ? mu * std::fabs(b) + std::fabs(1 - tau) * g_scale : g_scale;
        b = t > 1 ? mu * b + (1 - tau) * g : g;
        g_scale = p.nesterov ? g_scale + mu * b_scale : b_scale;
        g = p.nesterov ? g + mu * b : b;
      }
      scales->param[i] = std::fabs(theta[i]) + lr * g_scale;
      theta[i] -= lr * g;
      continue;
    }
    if (p.kind == Kind::kRmsprop) {
      // g <- g + lambda * theta; v <- alpha * v + (1 - alpha) * g^2;
      // centered: g_ave <- alpha * g_ave + (1 - alpha) * g, v~ = v - g_ave^2;
      // mu > 0: b <- mu * b + g / (sqrt(v~) + eps), theta <- theta - lr * b;
      // else theta <- theta - lr * g / (sqrt(v~) + eps).
      g += lambda * theta[i];
      g_scale += lambda * std::fabs(theta[i]);
      double& v = st.slot[0][i];
      double& v_scale = scales->slot[0][i];
      v_scale = alpha * std::fabs(v) + (1 - alpha) * g_scale * g_scale;
      v = alpha * v + (1 - alpha) * g * g;
      double var = v, var_scale = v_scale;
      if (p.centered) {
        const int k = mu > 0 ? 2 : 1;
        double& g_ave = st.slot[k][i];
        double& g_ave_scale = scales->slot[k][i];
        g_ave_scale = alpha * std::fabs(g_ave) + (1 - alpha) * g_scale;
        g_ave = alpha * g_ave + (1 - alpha) * g;
        var = v - g_ave * g_ave;
        var_scale = v_scale + 2 * g_ave_scale * g_ave_scale;
      }
      const double d = std::sqrt(var) + eps;
      const double u_scale = QuotientScale(g, g_scale, d, DenomScale(var, var_scale, eps));
      if (mu > 0) {
        double& b = st.slot[1][i];
        double& b_scale = scales->slot[1][i];
        b_scale = mu * std::fabs(b) + u_scale;
        b = mu * b + g / d;
        scales->param[i] = std::fabs(theta[i]) + lr * b_scale;
        theta[i] -= lr * b;
      } else {
        scales->param[i] = std::fabs(theta[i]) + lr * u_scale;
        theta[i] -= lr * g / d;
      }
      continue;
    }
    if (p.kind == Kind::kAdagrad) {
      // g <- g + lambda * theta; lr~ = lr / (1 + (t - 1) * eta);
      // sum <- sum + g^2; theta <- theta - lr~ * g / (sqrt(sum) + eps).
      g += lambda * theta[i];
      g_scale += lambda * std::fabs(theta[i]);
      const double clr = lr / (1 + static_cast<double>(t - 1) * eta);
      double& sum = st.slot[0][i];
      double& sum_scale = scales->slot[0][i];
      sum_scale = std::fabs(sum) + g_scale * g_scale;
      sum += g * g;
      const double d = std::sqrt(sum) + eps;
      scales->param[i] =
          std::fabs(theta[i]) + clr * QuotientScale(g, g_scale, d, DenomScale(sum, sum_scale, eps));
      theta[i] -= clr * g / d;
      continue;
    }
    if (p.kind == Kind::kAdamW) {
      theta[i] -= lr * lambda * theta[i];  // theta <- theta - lr * lambda * theta
    } else {
      g += lambda * theta[i];  // g <- g + lambda * theta
      g_scale += lambda * std::fabs(theta[i]);
    }
    double& m = st.slot[0][i];
    double& v = st.slot[1][i];
    scales->slot[0][i] = b1 * std::fabs(m) + (1 - b1) * g_scale;
    scales->slot[1][i] = b2 * std::fabs(v) + (1 - b2) * g_scale * g_scale;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(t));
    const double m_hat = m / bc1;
    const double v_hat = v / bc2;
    const double denom = std::sqrt(v_hat) + eps;
    // The update's error: its relative rounding plus m's cancellation error.
    scales->param[i] = std::fabs(theta[i]) + 2 * lr * (scales->slot[0][i] / bc1) / denom;
    theta[i] -= lr * m_hat / denom;
  }
}

// Reference state started from a run's float state.
RefState RefStateFrom(const std::vector<std::vector<float>>& state) {
  RefState st;
  for (size_t k = 0; k < state.size(); ++k) st.slot[k] = ToDouble(state[k]);
  return st;
}

// ---------------------------------------------------------------------------
// Helpers.

// Parameters and optimizer state of one run, stepped with ApplyUpdate.
struct Trajectory {
  OptimizerParams p;
  std::vector<float> params;
  std::vector<std::vector<float>> state;

  Trajectory(const OptimizerParams& p_in, std::vector<float> params_in)
      : p(p_in), params(std::move(params_in)) {
    // Garbage first: InitState must write every element.
    state.assign(StateSlots(p), std::vector<float>(params.size(), -7.0f));
    std::vector<float*> ptrs = StatePtrs();
    InitState(p, ptrs.data(), params.size());
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
      "%s lr=%g momentum=%g dampening=%g nesterov=%d wd=%g beta1=%g beta2=%g eps=%g alpha=%g "
      "centered=%d lr_decay=%g initial_accumulator_value=%g",
      OptimizerKindName(p.kind), p.lr, p.momentum, p.dampening, p.nesterov, p.weight_decay, p.beta1,
      p.beta2, p.eps, p.alpha, p.centered, p.lr_decay, p.initial_accumulator_value);
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
// nesterov/weight decay; Adam and AdamW with and without weight decay;
// RMSprop centered/momentum/weight decay; Adagrad weight decay/lr_decay/
// initial_accumulator_value).

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
  for (bool centered : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      for (float wd : {0.0f, 0.05f}) {
        OptimizerParams p;
        p.kind = Kind::kRmsprop;
        p.lr = 0.01f;
        p.centered = centered;
        p.momentum = momentum;
        p.weight_decay = wd;
        configs.push_back(
            {absl::StrFormat("RMSprop_c%d_m%d_wd%d", centered, momentum != 0, wd != 0), p});
      }
    }
  }
  for (float wd : {0.0f, 0.05f}) {
    for (float lr_decay : {0.0f, 0.01f}) {
      for (float init : {0.0f, 0.1f}) {
        OptimizerParams p;
        p.kind = Kind::kAdagrad;
        p.lr = 0.05f;
        p.eps = 1e-10f;
        p.weight_decay = wd;
        p.lr_decay = lr_decay;
        p.initial_accumulator_value = init;
        configs.push_back(
            {absl::StrFormat("Adagrad_wd%d_decay%d_init%d", wd != 0, lr_decay != 0, init != 0), p});
      }
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
  if (p.kind == Kind::kAdam || p.kind == Kind::kAdamW) {
    p.beta1 = uniform(0.0, 0.99);
    p.beta2 = uniform(0.9, 0.99999);
  }
  if (p.kind != Kind::kSgd) p.eps = log_uniform(1e-10, 1e-4);
  if (p.kind == Kind::kRmsprop) p.alpha = uniform(0.5, 0.9999);
  if (p.lr_decay != 0) p.lr_decay = log_uniform(1e-4, 0.5);
  if (p.initial_accumulator_value != 0) p.initial_accumulator_value = log_uniform(1e-3, 1.0);
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

// (d) Loss scaling: grad_scale multiplies each gradient element (in float)
// before the update, exactly as scaling the gradient first would; the fused
// path does it after the mean. Spans block boundaries and odd lengths.
TEST_P(OptimizerConfigTest, GradScaleEqualsScalingTheGradientFirst) {
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

TEST(OptimizerDeathTest, StepBelowOneAborts) {
  OptimizerParams p;
  float x = 1.0f, g = 1.0f;
  EXPECT_DEATH(ApplyUpdate(p, 0, &x, &g, nullptr, 1), "step must be >= 1");
  const float* srcs[] = {&g};
  EXPECT_DEATH(ReduceAndApply(p, 1, &x, srcs, 0, nullptr, 1), "w must be >= 1");
}

}  // namespace
}  // namespace tessel
