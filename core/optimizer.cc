#include "core/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"

// Every hot loop below is a plain loop that GCC vectorises on its own (this
// file is built with -O3 -fno-math-errno -ffp-contract=off), compiled twice
// through target_clones and picked at load time by an ifunc resolver. With
// contraction off, both clones and the scalar remainder loops perform the same
// IEEE operations in the same order, so results do not depend on the CPU, on n
// or on alignment. Kernels are templates over every option that would
// otherwise be a per-element branch.
#define TESSEL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

[[noreturn]] void Fatal(const char* what) {
  std::fprintf(stderr, "tessel/core/optimizer: %s\n", what);
  std::abort();
}

// Per-call scalars, derived from OptimizerParams and step exactly as torch's
// Python code derives them (double arithmetic on the Python floats), then
// rounded to float the way ATen converts a Scalar for a float tensor.
struct SgdScalars {
  float neg_lr;               // add_(d_p, alpha=-lr)
  float weight_decay;         // d_p.add(param, alpha=weight_decay)
  float momentum;             // buf.mul_(momentum); d_p.add(buf, alpha=momentum)
  float one_minus_dampening;  // buf.add_(d_p, alpha=1 - dampening)
};

struct AdamScalars {
  float weight_decay;     // Adam: grad.add(param, alpha=weight_decay)
  float decay;            // AdamW: param.mul_(1 - lr * weight_decay)
  float beta1;            // exp_avg.mul_(beta1)
  float one_minus_beta1;  // .add_(grad, alpha=1 - beta1)
  float beta2;            // exp_avg_sq.mul_(beta2)
  float one_minus_beta2;  // .addcmul_(grad, grad, value=1 - beta2)
  float bc2_sqrt;         // exp_avg_sq.sqrt() / bias_correction2_sqrt
  float eps;              // .add_(eps)
  float neg_step_size;    // param.addcdiv_(exp_avg, denom, value=-step_size)
};

SgdScalars MakeSgdScalars(const OptimizerParams& p) {
  SgdScalars s;
  s.neg_lr = static_cast<float>(-static_cast<double>(p.lr));
  s.weight_decay = p.weight_decay;
  s.momentum = p.momentum;
  s.one_minus_dampening = static_cast<float>(1.0 - static_cast<double>(p.dampening));
  return s;
}

AdamScalars MakeAdamScalars(const OptimizerParams& p, int64_t step) {
  const double lr = p.lr;
  const double beta1 = p.beta1;
  const double beta2 = p.beta2;
  // Python's `beta ** step` with step a float (torch keeps state['step'] as a
  // float tensor and calls .item()): C pow on doubles.
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double step_size = lr / bias_correction1;
  AdamScalars s;
  s.weight_decay = p.weight_decay;
  s.decay = static_cast<float>(1.0 - lr * static_cast<double>(p.weight_decay));
  s.beta1 = p.beta1;
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = p.beta2;
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = p.eps;
  s.neg_step_size = static_cast<float>(-step_size);
  return s;
}

// SGD without momentum: param += -lr * (grad [+ wd * param]).
template <bool kWeightDecay>
TESSEL_VECTOR_CLONES void SgdKernel(SgdScalars s, float* __restrict param,
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
TESSEL_VECTOR_CLONES void SgdMomentumKernel(SgdScalars s, float* __restrict param,
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
TESSEL_VECTOR_CLONES void AdamKernel(AdamScalars s, float* __restrict param,
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

// out[0, len) = mean over w of srcs[j][off, off + len), summed left to right.
// `acc` is scratch of kBlock floats; `out` may alias any source exactly.
void ReduceMeanBlock(const float* const* srcs, int w, size_t off, size_t len, float* acc,
                     float* out) {
  if (w == 1) {
    std::copy(srcs[0] + off, srcs[0] + off + len, acc);
  } else {
    AddPair(srcs[0] + off, srcs[1] + off, acc, len);
    for (int j = 2; j < w; ++j) AddInto(srcs[j] + off, acc, len);
  }
  DivInto(acc, static_cast<float>(w), out, len);
}

// The kernel choice and scalars for one call, shared by ApplyUpdate and every
// block of ReduceAndApply so both run the very same code.
class Update {
 public:
  Update(const OptimizerParams& p, int64_t step) : kind_(p.kind) {
    if (step < 1) Fatal("ApplyUpdate: step must be >= 1 (torch's state['step'] after increment)");
    weight_decay_ = p.weight_decay != 0;
    switch (kind_) {
      case Kind::kSgd:
        sgd_ = MakeSgdScalars(p);
        momentum_ = p.momentum != 0;
        nesterov_ = p.nesterov;
        first_ = step == 1;
        break;
      case Kind::kAdam:
      case Kind::kAdamW:
        adam_ = MakeAdamScalars(p, step);
        break;
    }
  }

  // Updates params[0, n) from grad[0, n); state slots start at `off`.
  void Run(float* params, const float* grad, float* const* state, size_t off, size_t n) const {
    switch (kind_) {
      case Kind::kSgd:
        if (momentum_) {
          RunSgdMomentum(params, grad, state[0] + off, n);
        } else if (weight_decay_) {
          SgdKernel<true>(sgd_, params, grad, n);
        } else {
          SgdKernel<false>(sgd_, params, grad, n);
        }
        return;
      case Kind::kAdam:
        if (weight_decay_) {
          AdamKernel<false, true>(adam_, params, grad, state[0] + off, state[1] + off, n);
        } else {
          AdamKernel<false, false>(adam_, params, grad, state[0] + off, state[1] + off, n);
        }
        return;
      case Kind::kAdamW:
        AdamKernel<true, false>(adam_, params, grad, state[0] + off, state[1] + off, n);
        return;
    }
    Fatal("ApplyUpdate: unknown OptimizerParams::Kind");
  }

 private:
  template <bool kWeightDecay, bool kNesterov>
  void RunSgdMomentumWith(float* params, const float* grad, float* buf, size_t n) const {
    if (first_) {
      SgdMomentumKernel<kWeightDecay, kNesterov, true>(sgd_, params, grad, buf, n);
    } else {
      SgdMomentumKernel<kWeightDecay, kNesterov, false>(sgd_, params, grad, buf, n);
    }
  }

  void RunSgdMomentum(float* params, const float* grad, float* buf, size_t n) const {
    if (weight_decay_ && nesterov_) {
      RunSgdMomentumWith<true, true>(params, grad, buf, n);
    } else if (weight_decay_) {
      RunSgdMomentumWith<true, false>(params, grad, buf, n);
    } else if (nesterov_) {
      RunSgdMomentumWith<false, true>(params, grad, buf, n);
    } else {
      RunSgdMomentumWith<false, false>(params, grad, buf, n);
    }
  }

  Kind kind_;
  bool weight_decay_ = false;
  bool momentum_ = false;
  bool nesterov_ = false;
  bool first_ = false;
  SgdScalars sgd_{};
  AdamScalars adam_{};
};

absl::Status Invalid(const OptimizerParams& p, const char* field, double value,
                     const char* requirement) {
  return absl::InvalidArgumentError(absl::StrFormat("invalid %s optimizer parameter %s = %g: %s",
                                                    OptimizerKindName(p.kind), field, value,
                                                    requirement));
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
  }
  return "unknown";
}

absl::Status ValidateOptimizerParams(const OptimizerParams& p) {
  if (p.kind != Kind::kSgd && p.kind != Kind::kAdam && p.kind != Kind::kAdamW) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid optimizer kind %d: expected kSgd, kAdam or kAdamW", static_cast<int>(p.kind)));
  }
  // `!(x >= 0)` also rejects NaN, as torch's `not 0.0 <= x` does.
  if (!std::isfinite(p.lr) || !(p.lr >= 0)) {
    return Invalid(p, "lr", p.lr, "the learning rate must be finite and >= 0");
  }
  if (!std::isfinite(p.weight_decay) || !(p.weight_decay >= 0)) {
    return Invalid(p, "weight_decay", p.weight_decay, "must be finite and >= 0");
  }
  if (p.kind == Kind::kSgd) {
    if (!std::isfinite(p.momentum) || !(p.momentum >= 0)) {
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
  if (!std::isfinite(p.eps) || !(p.eps >= 0)) {
    return Invalid(p, "eps", p.eps, "must be finite and >= 0");
  }
  if (!(p.beta1 >= 0 && p.beta1 < 1)) {
    return Invalid(p, "beta1", p.beta1, "must be in [0, 1)");
  }
  if (!(p.beta2 >= 0 && p.beta2 < 1)) {
    return Invalid(p, "beta2", p.beta2, "must be in [0, 1)");
  }
  if (p.momentum != 0 || p.dampening != 0 || p.nesterov) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid %s optimizer parameters: momentum = %g, dampening = %g, nesterov = %s are "
        "SGD-only and must be left at 0/false; %s's momentum is beta1",
        OptimizerKindName(p.kind), p.momentum, p.dampening, p.nesterov ? "true" : "false",
        OptimizerKindName(p.kind)));
  }
  return absl::OkStatus();
}

int StateSlots(const OptimizerParams& p) {
  switch (p.kind) {
    case Kind::kSgd:
      return p.momentum != 0 ? 1 : 0;
    case Kind::kAdam:
    case Kind::kAdamW:
      return 2;
  }
  return 0;
}

void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n) {
  const Update update(p, step);
  if (n == 0) return;
  update.Run(params, grad, state, 0, n);
}

void ReduceMean(const float* const* srcs, int w, float* out, size_t n) {
  if (w < 1) Fatal("ReduceMean: w must be >= 1");
  alignas(64) float acc[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceMeanBlock(srcs, w, off, len, acc, out + off);
  }
}

void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n) {
  if (w < 1) Fatal("ReduceAndApply: w must be >= 1");
  const Update update(p, step);
  alignas(64) float acc[kBlock];
  alignas(64) float grad[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    ReduceMeanBlock(srcs, w, off, len, acc, grad);
    update.Run(params + off, grad, state, off, len);
  }
}

}  // namespace tessel
