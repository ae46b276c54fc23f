#include "core/optimizer_testing.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"

namespace tessel::optimizer_testing {
namespace {

using Kind = OptimizerParams::Kind;

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

}  // namespace

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

void RefStep(const OptimizerParams& p, int64_t t, std::vector<double>& theta,
             const std::vector<double>& grad, RefState& st, RefScales* scales) {
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

RefState RefStateFrom(const std::vector<std::vector<float>>& state) {
  RefState st;
  for (size_t k = 0; k < state.size(); ++k) st.slot[k] = ToDouble(state[k]);
  return st;
}

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

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

std::vector<float> RandomGrad(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> exponent(-3.0, 1.0);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> g(n);
  for (float& x : g) {
    x = static_cast<float>((negative(rng) ? -1.0 : 1.0) * std::pow(10.0, exponent(rng)));
  }
  return g;
}

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

}  // namespace tessel::optimizer_testing
