#include "core/optimizer_params.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

absl::Status Invalid(const OptimizerParams& p, const char* field, double value,
                     const char* requirement) {
  return absl::InvalidArgumentError(absl::StrFormat("invalid %s optimizer parameter %s = %g: %s",
                                                    OptimizerKindName(p.kind), field, value,
                                                    requirement));
}

bool KnownKind(Kind kind) {
  return kind == Kind::kSgd || kind == Kind::kAdam || kind == Kind::kAdamW ||
         kind == Kind::kRmsprop || kind == Kind::kAdagrad;
}

// `!(x >= 0)` also rejects NaN, as torch's `not 0.0 <= x` does.
bool FiniteNonNegative(float x) { return std::isfinite(x) && x >= 0; }

// Rejects fields `p.kind` does not read that differ from their defaults.
// beta1, beta2 and eps are not checked for SGD: SGD configurations have always
// been accepted with any values there.
absl::Status CheckUnusedFields(const OptimizerParams& p) {
  const OptimizerParams d;
  const Kind k = p.kind;
  const bool sgd = k == Kind::kSgd;
  const bool adam = k == Kind::kAdam || k == Kind::kAdamW;
  const bool rmsprop = k == Kind::kRmsprop;
  const bool adagrad = k == Kind::kAdagrad;
  std::vector<std::string> set, defaults;
  auto check = [&](bool used, const char* name, float value, float def) {
    if (used || value == def) return;  // NaN differs from every default
    set.push_back(absl::StrFormat("%s = %g", name, value));
    defaults.push_back(absl::StrFormat("%s = %g", name, def));
  };
  auto check_bool = [&](bool used, const char* name, bool value, bool def) {
    if (used || value == def) return;
    set.push_back(absl::StrFormat("%s = %s", name, value ? "true" : "false"));
    defaults.push_back(absl::StrFormat("%s = %s", name, def ? "true" : "false"));
  };
  check(sgd || rmsprop, "momentum", p.momentum, d.momentum);
  check(sgd, "dampening", p.dampening, d.dampening);
  check_bool(sgd, "nesterov", p.nesterov, d.nesterov);
  check(sgd || adam, "beta1", p.beta1, d.beta1);
  check(sgd || adam, "beta2", p.beta2, d.beta2);
  check(rmsprop, "alpha", p.alpha, d.alpha);
  check_bool(rmsprop, "centered", p.centered, d.centered);
  check(adagrad, "lr_decay", p.lr_decay, d.lr_decay);
  check(adagrad, "initial_accumulator_value", p.initial_accumulator_value,
        d.initial_accumulator_value);
  if (set.empty()) return absl::OkStatus();
  const char* name = OptimizerKindName(k);
  std::string hint;
  if (adam && p.momentum != d.momentum) {
    hint = absl::StrFormat("; %s's momentum is beta1", name);
  } else if (rmsprop && (p.beta1 != d.beta1 || p.beta2 != d.beta2)) {
    hint = "; RMSprop's smoothing constant is alpha";
  }
  const bool one = set.size() == 1;
  return absl::InvalidArgumentError(absl::StrFormat(
      "invalid %s optimizer parameters: %s %s not apply to %s; leave %s at %s default%s (%s)%s",
      name, absl::StrJoin(set, ", "), one ? "does" : "do", name, one ? "it" : "them",
      one ? "its" : "their", one ? "" : "s", absl::StrJoin(defaults, ", "), hint));
}

absl::Status ValidateSgd(const OptimizerParams& p) {
  if (!FiniteNonNegative(p.momentum)) {
    return Invalid(p, "momentum", p.momentum, "must be finite and >= 0");
  }
  if (!std::isfinite(p.dampening)) {
    return Invalid(p, "dampening", p.dampening, "must be finite");
  }
  if (p.nesterov && (p.momentum <= 0 || p.dampening != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid SGD optimizer parameters: nesterov momentum requires momentum > 0 and "
        "dampening == 0, got momentum = %g, dampening = %g",
        p.momentum, p.dampening));
  }
  return absl::OkStatus();
}

absl::Status ValidateAdam(const OptimizerParams& p) {
  if (!FiniteNonNegative(p.eps)) return Invalid(p, "eps", p.eps, "must be finite and >= 0");
  if (!(p.beta1 >= 0 && p.beta1 < 1)) return Invalid(p, "beta1", p.beta1, "must be in [0, 1)");
  if (!(p.beta2 >= 0 && p.beta2 < 1)) return Invalid(p, "beta2", p.beta2, "must be in [0, 1)");
  return absl::OkStatus();
}

absl::Status ValidateRmsprop(const OptimizerParams& p) {
  if (!FiniteNonNegative(p.eps)) return Invalid(p, "eps", p.eps, "must be finite and >= 0");
  if (!(p.alpha >= 0 && p.alpha <= 1)) {
    return Invalid(p, "alpha", p.alpha,
                   "must be in [0, 1] (torch accepts alpha > 1, but then square_avg turns "
                   "negative and the updates NaN)");
  }
  if (!FiniteNonNegative(p.momentum)) {
    return Invalid(p, "momentum", p.momentum, "must be finite and >= 0");
  }
  if (p.centered && p.alpha == 0) {
    return Invalid(p, "alpha", p.alpha,
                   "centered RMSprop needs alpha > 0: with alpha = 0 its variance estimate "
                   "g^2 - g^2 is 0 up to rounding (torch yields NaN for about half the "
                   "parameters)");
  }
  return absl::OkStatus();
}

absl::Status ValidateAdagrad(const OptimizerParams& p) {
  if (!FiniteNonNegative(p.eps)) return Invalid(p, "eps", p.eps, "must be finite and >= 0");
  if (!FiniteNonNegative(p.lr_decay)) {
    return Invalid(p, "lr_decay", p.lr_decay, "must be finite and >= 0");
  }
  if (!FiniteNonNegative(p.initial_accumulator_value)) {
    return Invalid(p, "initial_accumulator_value", p.initial_accumulator_value,
                   "must be finite and >= 0");
  }
  return absl::OkStatus();
}

// The kind's own conditions (ValidateOptimizerParams checks the shared ones).
absl::Status ValidateKind(const OptimizerParams& p) {
  switch (p.kind) {
    case Kind::kSgd:
      return ValidateSgd(p);
    case Kind::kAdam:
    case Kind::kAdamW:
      return ValidateAdam(p);
    case Kind::kRmsprop:
      return ValidateRmsprop(p);
    case Kind::kAdagrad:
      return ValidateAdagrad(p);
  }
  return absl::OkStatus();  // unreachable: the kind was checked first
}

}  // namespace

const char* OptimizerKindName(OptimizerParams::Kind kind) {
  switch (kind) {
    case Kind::kSgd:
      return "SGD";
    case Kind::kAdam:
      return "Adam";
    case Kind::kAdamW:
      return "AdamW";
    case Kind::kRmsprop:
      return "RMSprop";
    case Kind::kAdagrad:
      return "Adagrad";
  }
  return "unknown";
}

absl::Status ValidateOptimizerParams(const OptimizerParams& p) {
  if (!KnownKind(p.kind)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid optimizer kind %d: expected kSgd, kAdam, kAdamW, kRmsprop or kAdagrad",
        static_cast<int>(p.kind)));
  }
  if (!FiniteNonNegative(p.lr)) {
    return Invalid(p, "lr", p.lr, "the learning rate must be finite and >= 0");
  }
  if (!FiniteNonNegative(p.weight_decay)) {
    return Invalid(p, "weight_decay", p.weight_decay, "must be finite and >= 0");
  }
  if (!(std::isfinite(p.grad_scale) && p.grad_scale > 0)) {
    return Invalid(p, "grad_scale", p.grad_scale,
                   "must be finite and > 0 (1 / the loss scale; 1 = no scaling)");
  }
  TESSEL_RETURN_IF_ERROR(ValidateKind(p));
  return CheckUnusedFields(p);
}

int StateSlots(const OptimizerParams& p) {
  switch (p.kind) {
    case Kind::kSgd:
      return p.momentum != 0 ? 1 : 0;
    case Kind::kAdam:
    case Kind::kAdamW:
      return 2;
    case Kind::kRmsprop:
      return 1 + (p.momentum > 0 ? 1 : 0) + (p.centered ? 1 : 0);
    case Kind::kAdagrad:
      return 1;
  }
  return 0;
}

void InitState(const OptimizerParams& p, float* const* state, size_t n) {
  if (n == 0) return;
  const int slots = StateSlots(p);
  for (int k = 0; k < slots; ++k) {
    const float value = p.kind == Kind::kAdagrad ? p.initial_accumulator_value : 0.0f;
    std::fill_n(state[k], n, value);
  }
}

}  // namespace tessel
