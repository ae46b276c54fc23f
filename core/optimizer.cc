#include "core/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/internal/kernel_support.h"

// Every kernel below is a plain loop that GCC vectorises on its own
// (core/internal/kernel_support.h). Kernels are templates over every option
// that would otherwise be a per-element branch.

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

// Elements per block of loss scaling: the scaled gradient lives on the stack.
constexpr size_t kScaleBlock = 1024;

// Element i of a kernel's gradient: grad[i], or with kMean the mean
// (grad[i] + grad_b[i]) / divisor, the last add and the division of
// core/reduce.cc's rank-order mean done here in registers: the same two
// float roundings as that mean stored and read back (no contraction, no
// excess precision on x86-64), so the same bits.
template <bool kMean>
inline float GradAt(const float* __restrict grad, const float* __restrict grad_b, float divisor,
                    size_t i) {
  if (kMean) return (grad[i] + grad_b[i]) / divisor;
  return grad[i];
}

// Element i of the parameters before the update: param[i] (in place), or
// with kCopy src[i] (out of place: the update reads src and writes param).
// In place, src is null and never read, so `param` is the one pointer to the
// array and the kernels' __restrict holds; out of place, src and param must
// not overlap (OptimizerUpdate::Run calls the in-place form for in == out).
template <bool kCopy>
inline float ParamAt(const float* __restrict param, const float* __restrict src, size_t i) {
  if (kCopy) return src[i];
  return param[i];
}

// SGD without momentum: param += -lr * (grad [+ wd * param]).
template <bool kMean, bool kCopy, bool kWeightDecay>
TESSEL_VECTOR_CLONES void SgdKernel(const OptimizerScalars& s, float* __restrict param,
                                    const float* __restrict src, const float* __restrict grad,
                                    const float* __restrict grad_b, float divisor, size_t n) {
  const float neg_lr = s.neg_lr;
  const float wd = s.weight_decay;
  for (size_t i = 0; i < n; ++i) {
    const float p = ParamAt<kCopy>(param, src, i);
    float d_p = GradAt<kMean>(grad, grad_b, divisor, i);
    if (kWeightDecay) d_p = d_p + wd * p;
    param[i] = p + neg_lr * d_p;
  }
}

// SGD with momentum. kFirst: torch's momentum buffer is None, so it becomes a
// clone of d_p (no momentum, no dampening applied).
template <bool kMean, bool kCopy, bool kWeightDecay, bool kNesterov, bool kFirst>
TESSEL_VECTOR_CLONES void SgdMomentumKernel(const OptimizerScalars& s, float* __restrict param,
                                            const float* __restrict src,
                                            const float* __restrict grad,
                                            const float* __restrict grad_b, float divisor,
                                            float* __restrict buf, size_t n) {
  const float neg_lr = s.neg_lr;
  const float wd = s.weight_decay;
  const float momentum = s.momentum;
  const float one_minus_dampening = s.one_minus_dampening;
  for (size_t i = 0; i < n; ++i) {
    const float p = ParamAt<kCopy>(param, src, i);
    float d_p = GradAt<kMean>(grad, grad_b, divisor, i);
    if (kWeightDecay) d_p = d_p + wd * p;
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
    param[i] = p + neg_lr * d_p;
  }
}

// Adam (kDecoupled = false, L2 term in the gradient when kWeightDecay) and
// AdamW (kDecoupled = true: param *= 1 - lr * wd first, no L2 term).
template <bool kMean, bool kCopy, bool kDecoupled, bool kWeightDecay>
TESSEL_VECTOR_CLONES void AdamKernel(const OptimizerScalars& s, float* __restrict param,
                                     const float* __restrict src, const float* __restrict grad,
                                     const float* __restrict grad_b, float divisor,
                                     float* __restrict exp_avg, float* __restrict exp_avg_sq,
                                     size_t n) {
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
    float p = ParamAt<kCopy>(param, src, i);
    float g = GradAt<kMean>(grad, grad_b, divisor, i);
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
template <bool kMean, bool kCopy, bool kWeightDecay, bool kCentered, bool kMomentum>
TESSEL_VECTOR_CLONES void RmspropKernel(const OptimizerScalars& s, float* __restrict param,
                                        const float* __restrict src, const float* __restrict grad,
                                        const float* __restrict grad_b, float divisor,
                                        float* __restrict square_avg, float* __restrict buf,
                                        float* __restrict grad_avg, size_t n) {
  const float wd = s.weight_decay;
  const float alpha = s.alpha;
  const float one_minus_alpha = s.one_minus_alpha;
  const float eps = s.eps;
  const float momentum = s.momentum;
  const float neg_lr = s.neg_lr;
  for (size_t i = 0; i < n; ++i) {
    const float p = ParamAt<kCopy>(param, src, i);
    float g = GradAt<kMean>(grad, grad_b, divisor, i);
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
template <bool kMean, bool kCopy, bool kWeightDecay>
TESSEL_VECTOR_CLONES void AdagradKernel(const OptimizerScalars& s, float* __restrict param,
                                        const float* __restrict src, const float* __restrict grad,
                                        const float* __restrict grad_b, float divisor,
                                        float* __restrict sum, size_t n) {
  const float wd = s.weight_decay;
  const float eps = s.eps;
  const float neg_clr = s.neg_clr;
  for (size_t i = 0; i < n; ++i) {
    const float p = ParamAt<kCopy>(param, src, i);
    float g = GradAt<kMean>(grad, grad_b, divisor, i);
    if (kWeightDecay) g = g + wd * p;
    const float acc = sum[i] + (1.0f * g) * g;
    sum[i] = acc;
    const float std_dev = std::sqrt(acc) + eps;
    param[i] = p + (neg_clr * g) / std_dev;
  }
}

// A kernel's gradient: grad, or with kMean (grad + grad_b) / divisor.
struct GradIn {
  const float* grad;
  const float* grad_b = nullptr;
  float divisor = 1.f;
};

// A kernel's parameters: updated in place (in == nullptr), or read from in
// and written to out (kCopy).
struct ParamsIo {
  float* out;
  const float* in = nullptr;
};

template <bool kMean, bool kCopy, bool kWeightDecay, bool kNesterov>
void RunSgdMomentumWith(const OptimizerScalars& s, const ParamsIo& io, const GradIn& g, float* buf,
                        size_t n) {
  if (s.first_step) {
    SgdMomentumKernel<kMean, kCopy, kWeightDecay, kNesterov, true>(s, io.out, io.in, g.grad,
                                                                   g.grad_b, g.divisor, buf, n);
  } else {
    SgdMomentumKernel<kMean, kCopy, kWeightDecay, kNesterov, false>(s, io.out, io.in, g.grad,
                                                                    g.grad_b, g.divisor, buf, n);
  }
}

template <bool kMean, bool kCopy>
void RunSgdMomentum(const OptimizerScalars& s, const ParamsIo& io, const GradIn& g, float* buf,
                    size_t n) {
  if (s.has_weight_decay && s.nesterov) {
    RunSgdMomentumWith<kMean, kCopy, true, true>(s, io, g, buf, n);
  } else if (s.has_weight_decay) {
    RunSgdMomentumWith<kMean, kCopy, true, false>(s, io, g, buf, n);
  } else if (s.nesterov) {
    RunSgdMomentumWith<kMean, kCopy, false, true>(s, io, g, buf, n);
  } else {
    RunSgdMomentumWith<kMean, kCopy, false, false>(s, io, g, buf, n);
  }
}

template <bool kMean, bool kCopy, bool kWeightDecay, bool kCentered>
void RunRmspropWith(const OptimizerScalars& s, const ParamsIo& io, const GradIn& g,
                    float* const* state, size_t off, size_t n) {
  // Slots: square_avg, momentum_buffer (if momentum), grad_avg (if centered).
  float* square_avg = state[0] + off;
  if (s.has_momentum) {
    float* grad_avg = kCentered ? state[2] + off : nullptr;
    RmspropKernel<kMean, kCopy, kWeightDecay, kCentered, true>(
        s, io.out, io.in, g.grad, g.grad_b, g.divisor, square_avg, state[1] + off, grad_avg, n);
  } else {
    float* grad_avg = kCentered ? state[1] + off : nullptr;
    RmspropKernel<kMean, kCopy, kWeightDecay, kCentered, false>(
        s, io.out, io.in, g.grad, g.grad_b, g.divisor, square_avg, nullptr, grad_avg, n);
  }
}

template <bool kMean, bool kCopy>
void RunRmsprop(const OptimizerScalars& s, const ParamsIo& io, const GradIn& g, float* const* state,
                size_t off, size_t n) {
  if (s.has_weight_decay && s.centered) {
    RunRmspropWith<kMean, kCopy, true, true>(s, io, g, state, off, n);
  } else if (s.has_weight_decay) {
    RunRmspropWith<kMean, kCopy, true, false>(s, io, g, state, off, n);
  } else if (s.centered) {
    RunRmspropWith<kMean, kCopy, false, true>(s, io, g, state, off, n);
  } else {
    RunRmspropWith<kMean, kCopy, false, false>(s, io, g, state, off, n);
  }
}

template <bool kMean, bool kCopy>
void RunKind(Kind kind, const OptimizerScalars& s, const ParamsIo& io, const GradIn& g,
             float* const* state, size_t off, size_t n) {
  float* out = io.out;
  const float* in = io.in;
  const float* grad = g.grad;
  const float* grad_b = g.grad_b;
  const float d = g.divisor;
  switch (kind) {
    case Kind::kSgd:
      if (s.has_momentum) {
        RunSgdMomentum<kMean, kCopy>(s, io, g, state[0] + off, n);
      } else if (s.has_weight_decay) {
        SgdKernel<kMean, kCopy, true>(s, out, in, grad, grad_b, d, n);
      } else {
        SgdKernel<kMean, kCopy, false>(s, out, in, grad, grad_b, d, n);
      }
      return;
    case Kind::kAdam:
      if (s.has_weight_decay) {
        AdamKernel<kMean, kCopy, false, true>(s, out, in, grad, grad_b, d, state[0] + off,
                                              state[1] + off, n);
      } else {
        AdamKernel<kMean, kCopy, false, false>(s, out, in, grad, grad_b, d, state[0] + off,
                                               state[1] + off, n);
      }
      return;
    case Kind::kAdamW:
      AdamKernel<kMean, kCopy, true, false>(s, out, in, grad, grad_b, d, state[0] + off,
                                            state[1] + off, n);
      return;
    case Kind::kRmsprop:
      RunRmsprop<kMean, kCopy>(s, io, g, state, off, n);
      return;
    case Kind::kAdagrad:
      if (s.has_weight_decay) {
        AdagradKernel<kMean, kCopy, true>(s, out, in, grad, grad_b, d, state[0] + off, n);
      } else {
        AdagradKernel<kMean, kCopy, false>(s, out, in, grad, grad_b, d, state[0] + off, n);
      }
      return;
  }
  internal::KernelFatal("ApplyUpdate: unknown OptimizerParams::Kind");
}

// In place (io.in null) or out of place: the kernels' kCopy.
template <bool kMean>
void RunScaled(Kind kind, const OptimizerScalars& s, const ParamsIo& io, const GradIn& g,
               float* const* state, size_t off, size_t n) {
  if (io.in == nullptr) {
    RunKind<kMean, false>(kind, s, io, g, state, off, n);
  } else {
    RunKind<kMean, true>(kind, s, io, g, state, off, n);
  }
}

// `in` == `out` is the in-place update: the kernels get no second pointer.
ParamsIo Io(const float* in, float* out, size_t done) {
  return ParamsIo{out + done, in == out ? nullptr : in + done};
}

}  // namespace

OptimizerUpdate::OptimizerUpdate(const OptimizerParams& p, int64_t step)
    : kind_(p.kind), s_(MakeOptimizerScalars(p, step)) {}

void OptimizerUpdate::Run(const float* in, float* out, const float* grad, float* const* state,
                          size_t off, size_t n) const {
  if (s_.scale_grad) {  // loss scaling: grad * grad_scale, a block at a time
    alignas(64) float scaled[kScaleBlock];
    for (size_t done = 0; done < n; done += kScaleBlock) {
      const size_t len = std::min(kScaleBlock, n - done);
      for (size_t i = 0; i < len; ++i) scaled[i] = grad[done + i] * s_.grad_scale;
      RunScaled<false>(kind_, s_, Io(in, out, done), GradIn{scaled}, state, off + done, len);
    }
    return;
  }
  RunScaled<false>(kind_, s_, Io(in, out, 0), GradIn{grad}, state, off, n);
}

void OptimizerUpdate::RunMean(const float* in, float* out, const float* a, const float* b,
                              float divisor, float* const* state, size_t off, size_t n) const {
  if (s_.scale_grad) {  // the mean, then scaled, a block at a time
    alignas(64) float mean[kScaleBlock];
    for (size_t done = 0; done < n; done += kScaleBlock) {
      const size_t len = std::min(kScaleBlock, n - done);
      for (size_t i = 0; i < len; ++i) mean[i] = (a[done + i] + b[done + i]) / divisor;
      Run(in + done, out + done, mean, state, off + done, len);
    }
    return;
  }
  RunScaled<true>(kind_, s_, Io(in, out, 0), GradIn{a, b, divisor}, state, off, n);
}

void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n) {
  const OptimizerUpdate update(p, step);
  if (n == 0) return;
  update.Run(params, grad, state, 0, n);
}

}  // namespace tessel
