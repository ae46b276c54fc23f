#include "core/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

// Every hot loop below is a plain loop that GCC vectorises on its own (this
// file is built with -O3 -fno-math-errno -ffp-contract=off), compiled twice
// through target_clones and picked at load time by an ifunc resolver. With
// contraction off, both clones and the scalar remainder loops perform the same
// IEEE operations in the same order, so results do not depend on the CPU, on n
// or on alignment. Kernels are templates over every option that would
// otherwise be a per-element branch.
// ThreadSanitizer cannot run ifunc resolvers (they run before its runtime is
// up), so tsan builds keep the default clone only.
#if defined(__SANITIZE_THREAD__)
#define TESSEL_VECTOR_CLONES
#else
#define TESSEL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

[[noreturn]] void Fatal(const char* what) {
  std::fprintf(stderr, "tessel/core/optimizer: %s\n", what);
  std::abort();
}

// torch keeps state['step'] as a float32 tensor and increments it by 1, so it
// counts exactly up to 2^24 and then stays there (2^24 + 1 rounds back down).
constexpr int64_t kTorchStepLimit = int64_t{1} << 24;

// The per-kind parts of MakeOptimizerScalars: torch's Python arithmetic on
// doubles, rounded to float once.
void SetSgdScalars(const OptimizerParams& p, int64_t step, OptimizerScalars* s) {
  s->has_momentum = p.momentum != 0;
  s->momentum = p.momentum;
  s->nesterov = p.nesterov;
  s->first_step = step == 1;
  s->neg_lr = static_cast<float>(-static_cast<double>(p.lr));
  s->one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(p.dampening));
}

void SetAdamScalars(const OptimizerParams& p, int64_t step, OptimizerScalars* s) {
  const double lr = p.lr;
  const double beta1 = p.beta1;
  const double beta2 = p.beta2;
  // Python's `beta ** step` with step a float (torch keeps state['step'] as a
  // float tensor and calls .item()): C pow on doubles.
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double step_size = lr / bias_correction1;
  s->decay = static_cast<float>(1.0 - lr * static_cast<double>(p.weight_decay));
  s->beta1 = p.beta1;
  s->one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s->beta2 = p.beta2;
  s->one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s->bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s->eps = p.eps;
  s->neg_step_size = static_cast<float>(-step_size);
}

void SetRmspropScalars(const OptimizerParams& p, OptimizerScalars* s) {
  s->has_momentum = p.momentum > 0;
  s->momentum = p.momentum;
  s->centered = p.centered;
  s->alpha = p.alpha;
  s->one_minus_alpha = static_cast<float>(1.0 - static_cast<double>(p.alpha));
  s->eps = p.eps;
  s->neg_lr = static_cast<float>(-static_cast<double>(p.lr));
}

void SetAdagradScalars(const OptimizerParams& p, int64_t step, OptimizerScalars* s) {
  // clr = lr / (1 + (step - 1) * lr_decay), step = state['step'].item().
  const double torch_step = static_cast<double>(std::min(step, kTorchStepLimit));
  const double clr =
      static_cast<double>(p.lr) / (1.0 + (torch_step - 1.0) * static_cast<double>(p.lr_decay));
  s->eps = p.eps;
  s->neg_clr = static_cast<float>(-clr);
}

// SGD without momentum: param += -lr * (grad [+ wd * param]).
template <bool kWeightDecay>
TESSEL_VECTOR_CLONES void SgdKernel(const OptimizerScalars& s, float* __restrict param,
                                    const float* __restrict grad, size_t n) {
  const float neg_lr = s.neg_lr;
  const float wd = s.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    float d_p = grad[i];
    if (kWeightDecay) d_p = d_p + wd * param[i];
    param[i] = param[i] + neg_lr * d_p;
  }
}

// SGD with momentum. kFirst: torch's momentum buffer is None, so it becomes a
// clone of d_p (no momentum, no dampening applied).
template <bool kWeightDecay, bool kNesterov, bool kFirst>
TESSEL_VECTOR_CLONES void SgdMomentumKernel(const OptimizerScalars& s, float* __restrict param,
                                            const float* __restrict grad, float* __restrict buf,
                                            size_t n) {
  const float neg_lr = s.neg_lr;
  const float wd = s.weight_decay;
  const float momentum = s.momentum;
  const float one_minus_dampening = s.one_minus_dampening;
  for (size_t i = 0; i < n; ++i) {
    float d_p = grad[i];
    if (kWeightDecay) d_p = d_p + wd * param[i];
    float b;
    if (kFirst) {
      b = d_p;
    } else {
      b = buf[i] * momentum;
      b = b + one_minus_dampening * d_p;
    }
    buf[i] = b;
    if (kNesterov) {
      d_p = d_p + momentum * b;
    } else {
      d_p = b;
    }
    param[i] = param[i] + neg_lr * d_p;
  }
}

// Adam (kDecoupled = false, L2 term in the gradient when kWeightDecay) and
// AdamW (kDecoupled = true: param *= 1 - lr * wd first, no L2 term).
template <bool kDecoupled, bool kWeightDecay>
TESSEL_VECTOR_CLONES void AdamKernel(const OptimizerScalars& s, float* __restrict param,
                                     const float* __restrict grad, float* __restrict exp_avg,
                                     float* __restrict exp_avg_sq, size_t n) {
  const float wd = s.weight_decay;
  const float decay = s.decay;
  const float beta1 = s.beta1;
  const float one_minus_beta1 = s.one_minus_beta1;
  const float beta2 = s.beta2;
  const float one_minus_beta2 = s.one_minus_beta2;
  const float bc2_sqrt = s.bc2_sqrt;
  const float eps = s.eps;
  const float neg_step_size = s.neg_step_size;
  for (size_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = grad[i];
    if (kDecoupled) p = p * decay;
    if (!kDecoupled && kWeightDecay) g = g + wd * p;
    float m = exp_avg[i] * beta1;
    m = m + one_minus_beta1 * g;
    float v = exp_avg_sq[i] * beta2;
    v = v + (one_minus_beta2 * g) * g;  // addcmul: self + (value * t1) * t2
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    param[i] = p + (neg_step_size * m) / denom;  // addcdiv: self + (value * t1) / t2
  }
}

// RMSprop, torch 1.13 _single_tensor_rmsprop line by line:
//   grad = grad.add(param, alpha=weight_decay)               if kWeightDecay
//   square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
//   grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)          if kCentered
//   avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()  if kCentered
//   avg = square_avg.sqrt()                                   otherwise
//   avg = avg.add_(eps)
//   buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)  if kMomentum
//   param.addcdiv_(grad, avg, value=-lr)                      otherwise
// `buf` and `grad_avg` are not touched (and may be null) when not used.
template <bool kWeightDecay, bool kCentered, bool kMomentum>
TESSEL_VECTOR_CLONES void RmspropKernel(const OptimizerScalars& s, float* __restrict param,
                                        const float* __restrict grad, float* __restrict square_avg,
                                        float* __restrict buf, float* __restrict grad_avg,
                                        size_t n) {
  const float wd = s.weight_decay;
  const float alpha = s.alpha;
  const float one_minus_alpha = s.one_minus_alpha;
  const float eps = s.eps;
  const float momentum = s.momentum;
  const float neg_lr = s.neg_lr;
  for (size_t i = 0; i < n; ++i) {
    const float p = param[i];
    float g = grad[i];
    if (kWeightDecay) g = g + wd * p;
    float sq = square_avg[i] * alpha;
    sq = sq + (one_minus_alpha * g) * g;  // addcmul: self + (value * t1) * t2
    square_avg[i] = sq;
    float avg;
    if (kCentered) {
      float ga = grad_avg[i] * alpha;
      ga = ga + one_minus_alpha * g;
      grad_avg[i] = ga;
      avg = std::sqrt(sq + (-1.0f * ga) * ga);
    } else {
      avg = std::sqrt(sq);
    }
    avg = avg + eps;
    if (kMomentum) {
      float b = buf[i] * momentum;
      b = b + (1.0f * g) / avg;  // addcdiv: self + (value * t1) / t2
      buf[i] = b;
      param[i] = p + neg_lr * b;
    } else {
      param[i] = p + (neg_lr * g) / avg;
    }
  }
}

// Adagrad (dense), torch 1.13 _single_tensor_adagrad line by line:
//   grad = grad.add(param, alpha=weight_decay)   if kWeightDecay
//   state_sum.addcmul_(grad, grad, value=1)
//   std = state_sum.sqrt().add_(eps)
//   param.addcdiv_(grad, std, value=-clr)
template <bool kWeightDecay>
TESSEL_VECTOR_CLONES void AdagradKernel(const OptimizerScalars& s, float* __restrict param,
                                        const float* __restrict grad, float* __restrict sum,
                                        size_t n) {
  const float wd = s.weight_decay;
  const float eps = s.eps;
  const float neg_clr = s.neg_clr;
  for (size_t i = 0; i < n; ++i) {
    const float p = param[i];
    float g = grad[i];
    if (kWeightDecay) g = g + wd * p;
    const float acc = sum[i] + (1.0f * g) * g;
    sum[i] = acc;
    const float std_dev = std::sqrt(acc) + eps;
    param[i] = p + (neg_clr * g) / std_dev;
  }
}

TESSEL_VECTOR_CLONES void AddPair(const float* __restrict a, const float* __restrict b,
                                  float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = a[i] + b[i];
}

TESSEL_VECTOR_CLONES void AddInto(const float* __restrict src, float* __restrict acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + src[i];
}

TESSEL_VECTOR_CLONES void DivInto(const float* __restrict acc, float divisor, float* __restrict out,
                                  size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = acc[i] / divisor;
}

// Elements per block of the reduction: two such float buffers live on the
// stack and stay in L1 while the block is summed and consumed.
constexpr size_t kBlock = 1024;

// acc[0, len) = the sum of srcs[j][off, off + len), left to right. `acc` is
// scratch of kBlock floats.
void ReduceSumBlock(const float* const* srcs, int w, size_t off, size_t len, float* acc) {
  if (w == 1) {
    std::copy(srcs[0] + off, srcs[0] + off + len, acc);
  } else {
    AddPair(srcs[0] + off, srcs[1] + off, acc, len);
    for (int j = 2; j < w; ++j) AddInto(srcs[j] + off, acc, len);
  }
}

// out[0, len) = that sum divided by `divisor`. `out` may alias any source
// exactly.
void ReduceMeanBlock(const float* const* srcs, int w, float divisor, size_t off, size_t len,
                     float* acc, float* out) {
  ReduceSumBlock(srcs, w, off, len, acc);
  DivInto(acc, divisor, out, len);
}

// The kernel choice and scalars for one call, shared by ApplyUpdate and every
// block of ReduceAndApply so both run the very same code.
class Update {
 public:
  Update(const OptimizerParams& p, int64_t step)
      : kind_(p.kind), s_(MakeOptimizerScalars(p, step)) {}

  // Updates params[0, n) from grad[0, n); state slots start at `off`.
  void Run(float* params, const float* grad, float* const* state, size_t off, size_t n) const {
    if (s_.scale_grad) {  // loss scaling: grad * grad_scale, a block at a time
      alignas(64) float scaled[kScaleBlock];
      for (size_t done = 0; done < n; done += kScaleBlock) {
        const size_t len = std::min(kScaleBlock, n - done);
        for (size_t i = 0; i < len; ++i) scaled[i] = grad[done + i] * s_.grad_scale;
        RunScaled(params + done, scaled, state, off + done, len);
      }
      return;
    }
    RunScaled(params, grad, state, off, n);
  }

 private:
  static constexpr size_t kScaleBlock = 1024;

  void RunScaled(float* params, const float* grad, float* const* state, size_t off,
                 size_t n) const {
    switch (kind_) {
      case Kind::kSgd:
        if (s_.has_momentum) {
          RunSgdMomentum(params, grad, state[0] + off, n);
        } else if (s_.has_weight_decay) {
          SgdKernel<true>(s_, params, grad, n);
        } else {
          SgdKernel<false>(s_, params, grad, n);
        }
        return;
      case Kind::kAdam:
        if (s_.has_weight_decay) {
          AdamKernel<false, true>(s_, params, grad, state[0] + off, state[1] + off, n);
        } else {
          AdamKernel<false, false>(s_, params, grad, state[0] + off, state[1] + off, n);
        }
        return;
      case Kind::kAdamW:
        AdamKernel<true, false>(s_, params, grad, state[0] + off, state[1] + off, n);
        return;
      case Kind::kRmsprop:
        RunRmsprop(params, grad, state, off, n);
        return;
      case Kind::kAdagrad:
        if (s_.has_weight_decay) {
          AdagradKernel<true>(s_, params, grad, state[0] + off, n);
        } else {
          AdagradKernel<false>(s_, params, grad, state[0] + off, n);
        }
        return;
    }
    Fatal("ApplyUpdate: unknown OptimizerParams::Kind");
  }

  template <bool kWeightDecay, bool kNesterov>
  void RunSgdMomentumWith(float* params, const float* grad, float* buf, size_t n) const {
    if (s_.first_step) {
      SgdMomentumKernel<kWeightDecay, kNesterov, true>(s_, params, grad, buf, n);
    } else {
      SgdMomentumKernel<kWeightDecay, kNesterov, false>(s_, params, grad, buf, n);
    }
  }

  void RunSgdMomentum(float* params, const float* grad, float* buf, size_t n) const {
    if (s_.has_weight_decay && s_.nesterov) {
      RunSgdMomentumWith<true, true>(params, grad, buf, n);
    } else if (s_.has_weight_decay) {
      RunSgdMomentumWith<true, false>(params, grad, buf, n);
    } else if (s_.nesterov) {
      RunSgdMomentumWith<false, true>(params, grad, buf, n);
    } else {
      RunSgdMomentumWith<false, false>(params, grad, buf, n);
    }
  }

  template <bool kWeightDecay, bool kCentered>
  void RunRmspropWith(float* params, const float* grad, float* const* state, size_t off,
                      size_t n) const {
    // Slots: square_avg, momentum_buffer (if momentum), grad_avg (if centered).
    float* square_avg = state[0] + off;
    if (s_.has_momentum) {
      float* grad_avg = kCentered ? state[2] + off : nullptr;
      RmspropKernel<kWeightDecay, kCentered, true>(s_, params, grad, square_avg, state[1] + off,
                                                   grad_avg, n);
    } else {
      float* grad_avg = kCentered ? state[1] + off : nullptr;
      RmspropKernel<kWeightDecay, kCentered, false>(s_, params, grad, square_avg, nullptr, grad_avg,
                                                    n);
    }
  }

  void RunRmsprop(float* params, const float* grad, float* const* state, size_t off,
                  size_t n) const {
    if (s_.has_weight_decay && s_.centered) {
      RunRmspropWith<true, true>(params, grad, state, off, n);
    } else if (s_.has_weight_decay) {
      RunRmspropWith<true, false>(params, grad, state, off, n);
    } else if (s_.centered) {
      RunRmspropWith<false, true>(params, grad, state, off, n);
    } else {
      RunRmspropWith<false, false>(params, grad, state, off, n);
    }
  }

  Kind kind_;
  OptimizerScalars s_;
};

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
  absl::Status s;
  switch (p.kind) {
    case Kind::kSgd:
      s = ValidateSgd(p);
      break;
    case Kind::kAdam:
    case Kind::kAdamW:
      s = ValidateAdam(p);
      break;
    case Kind::kRmsprop:
      s = ValidateRmsprop(p);
      break;
    case Kind::kAdagrad:
      s = ValidateAdagrad(p);
      break;
  }
  if (!s.ok()) return s;
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

OptimizerScalars MakeOptimizerScalars(const OptimizerParams& p, int64_t step) {
  if (step < 1) Fatal("ApplyUpdate: step must be >= 1 (torch's state['step'] after increment)");
  OptimizerScalars s;
  s.scale_grad = p.grad_scale != 1.0f;
  s.grad_scale = p.grad_scale;
  s.has_weight_decay = p.weight_decay != 0;
  s.weight_decay = p.weight_decay;
  switch (p.kind) {
    case Kind::kSgd:
      SetSgdScalars(p, step, &s);
      break;
    case Kind::kAdam:
    case Kind::kAdamW:
      SetAdamScalars(p, step, &s);
      break;
    case Kind::kRmsprop:
      SetRmspropScalars(p, &s);
      break;
    case Kind::kAdagrad:
      SetAdagradScalars(p, step, &s);
      break;
  }
  return s;
}

void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n) {
  const Update update(p, step);
  if (n == 0) return;
  update.Run(params, grad, state, 0, n);
}

void ReduceMean(const float* const* srcs, int w, float* out, size_t n, int divisor) {
  if (w < 1 || divisor < 0) Fatal("ReduceMean: w must be >= 1 and divisor >= 0");
  const float d = static_cast<float>(divisor == 0 ? w : divisor);
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceMeanBlock(srcs, w, d, off, len, acc, out + off);
  }
}

void ReduceSum(const float* const* srcs, int w, float* out, size_t n) {
  if (w < 1) Fatal("ReduceSum: w must be >= 1");
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceSumBlock(srcs, w, off, len, acc);
    std::copy(acc, acc + len, out + off);
  }
}

void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n, int divisor) {
  if (w < 1 || divisor < 0) Fatal("ReduceAndApply: w must be >= 1 and divisor >= 0");
  const float d = static_cast<float>(divisor == 0 ? w : divisor);
  const Update update(p, step);
  alignas(64) float acc[kBlock];
  alignas(64) float grad[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceMeanBlock(srcs, w, d, off, len, acc, grad);
    update.Run(params + off, grad, state, off, len);
  }
}

}  // namespace tessel
