// Test helpers of the optimizer and reduce tests (testonly, //core only): a
// double-precision reference of every update rule written from the
// torch.optim documentation (not from the kernels), a run of parameters and
// state stepped with ApplyUpdate, tolerance bookkeeping, random inputs, and
// every valid combination of kinds and options.
//
// Example:
//   Trajectory run(config.params, RandomVector(rng, n, -2.0, 2.0));
//   std::vector<double> ref = ToDouble(run.params);
//   RefState ref_state = RefStateFrom(run.state);
//   RefStep(config.params, 1, ref, ToDouble(grad), ref_state);
//   run.Step(1, grad);
#ifndef TESSEL_CORE_OPTIMIZER_TESTING_H_
#define TESSEL_CORE_OPTIMIZER_TESTING_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/optimizer.h"

namespace tessel::optimizer_testing {

std::vector<double> ToDouble(const std::vector<float>& v);

// ---------------------------------------------------------------------------
// Double-precision reference: SGD, Adam with L2 weight decay, AdamW with
// decoupled decay, bias-corrected moments m_hat = m / (1 - beta1^t) and
// v_hat = v / (1 - beta2^t); RMSprop (plain or centered, with or without
// momentum); Adagrad with learning-rate decay.
//
// State slots follow core/optimizer_params.h: SGD [momentum_buffer];
// Adam/AdamW [exp_avg, exp_avg_sq]; RMSprop [square_avg, momentum_buffer if
// momentum > 0, grad_avg if centered]; Adagrad [sum].

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

// One step t of the reference on theta and st; fills *scales when given.
void RefStep(const OptimizerParams& p, int64_t t, std::vector<double>& theta,
             const std::vector<double>& grad, RefState& st, RefScales* scales = nullptr);

// Reference state started from a run's float state.
RefState RefStateFrom(const std::vector<std::vector<float>>& state);

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

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b);

// Every hyperparameter of `p`, for failure messages.
std::string Describe(const OptimizerParams& p);

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

std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, double lo, double hi);

// Gradient entries spread over magnitudes 1e-3..1e1 with random signs.
std::vector<float> RandomGrad(std::mt19937_64& rng, size_t n);

// ---------------------------------------------------------------------------
// Configurations: every kind and option combination (SGD momentum/dampening/
// nesterov/weight decay; Adam and AdamW with and without weight decay;
// RMSprop centered/momentum/weight decay; Adagrad weight decay/lr_decay/
// initial_accumulator_value).

struct Config {
  std::string name;
  OptimizerParams params;
};

inline void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

std::vector<Config> AllConfigs();

// Redraws the continuous hyperparameters of `base`, keeping its structure
// (kind, which of momentum/dampening/nesterov/weight decay are on).
OptimizerParams Perturb(const OptimizerParams& base, std::mt19937_64& rng);

}  // namespace tessel::optimizer_testing

#endif  // TESSEL_CORE_OPTIMIZER_TESTING_H_
