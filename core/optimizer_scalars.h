// The per-step scalars of one optimizer update, derived once from
// OptimizerParams and the step, and shared by every implementation of the
// per-element arithmetic: the CPU kernels (core/optimizer.h, core/reduce.h)
// and the CUDA kernels (gpu/kernels.cu through gpu/cuda_device.cc), so that
// they cannot drift apart.
//
// Contract:
//   - Scalar hyperparameters are widened to double and combined exactly as
//     torch 1.13's Python code does (1 - beta1, lr / (1 - beta1**step),
//     1 - alpha, lr / (1 + (step - 1) * lr_decay), ...), then rounded to float
//     once, the way ATen converts a Scalar for a float tensor.
//   - `step` is torch's state['step'] after its increment, i.e. 1 for the first
//     update. SGD uses it only to know that the momentum buffer is "None" yet
//     (first_step); RMSprop does not use it; Adam/AdamW (bias corrections)
//     and Adagrad (lr_decay) do.
//   - torch 1.13 keeps state['step'] as a float32 tensor, which stops counting
//     at 2^24; `step` here is an int64. Adagrad reproduces the stall (its
//     learning-rate decay uses min(step, 2^24)). For Adam/AdamW with
//     betas <= 0.999997 it changes nothing: beta**(2^24) < 2^-53, so both bias
//     corrections are already exactly 1.0 in double when torch's counter
//     stalls.
//   - MakeOptimizerScalars is pure (any thread); it aborts on step < 1, a
//     caller's bug. It assumes ValidateOptimizerParams(p) passed.
//   - This header includes only the standard library (no Abseil), so that
//     CUDA code compiled by nvcc may include it.
//
// Example:
//   const OptimizerScalars s = MakeOptimizerScalars(p, step);
//   // per element, Adam: m = m * s.beta1 + s.one_minus_beta1 * g; ...
//   //   param = param + (s.neg_step_size * m) / (sqrt(v) / s.bc2_sqrt + s.eps)
#ifndef TESSEL_CORE_OPTIMIZER_SCALARS_H_
#define TESSEL_CORE_OPTIMIZER_SCALARS_H_

#include <cstdint>

namespace tessel {

struct OptimizerParams;  // core/optimizer_params.h

// Which terms apply, and the float scalars. Fields the kind does not use stay
// 0 / false. The comments give the torch expression each value enters.
struct OptimizerScalars {
  // Every kind: g = grad * grad_scale first when scale_grad (grad_scale != 1).
  bool scale_grad = false;
  float grad_scale = 1.0f;
  // SGD, Adam, RMSprop, Adagrad: weight_decay != 0, the L2 term
  // grad.add(param, alpha=weight_decay). AdamW never adds it (see decay).
  bool has_weight_decay = false;
  float weight_decay = 0;
  // SGD: momentum != 0; RMSprop: momentum > 0 (a momentum buffer is used).
  bool has_momentum = false;
  float momentum = 0;  // buf.mul_(momentum); SGD nesterov: d_p.add(buf, alpha=momentum)
  // SGD and RMSprop: param.add_(d_p, alpha=-lr) / param.addcdiv_(g, avg, value=-lr).
  float neg_lr = 0;
  // SGD.
  bool nesterov = false;
  bool first_step = false;        // step == 1: the momentum buffer becomes a copy of d_p
  float one_minus_dampening = 0;  // buf.add_(d_p, alpha=1 - dampening)
  // Adam and AdamW.
  float decay = 0;            // AdamW: param.mul_(1 - lr * weight_decay)
  float beta1 = 0;            // exp_avg.mul_(beta1)
  float one_minus_beta1 = 0;  // .add_(grad, alpha=1 - beta1)
  float beta2 = 0;            // exp_avg_sq.mul_(beta2)
  float one_minus_beta2 = 0;  // .addcmul_(grad, grad, value=1 - beta2)
  float bc2_sqrt = 0;         // exp_avg_sq.sqrt() / bias_correction2_sqrt
  float neg_step_size = 0;    // param.addcdiv_(exp_avg, denom, value=-step_size)
  // Adam, AdamW, RMSprop and Adagrad: denom.add_(eps).
  float eps = 0;
  // RMSprop.
  bool centered = false;
  float alpha = 0;  // square_avg.mul_(alpha); grad_avg.mul_(alpha)
  float one_minus_alpha =
      0;  // .addcmul_(grad, grad, value=1 - alpha); .add_(grad, alpha=1 - alpha)
  // Adagrad: param.addcdiv_(grad, std, value=-clr), clr = lr / (1 + (step - 1) * lr_decay).
  float neg_clr = 0;
};

// torch's state['step'] is a float32 tensor incremented by 1: it counts
// exactly up to 2^24 and then stays there (2^24 + 1 rounds back down).
inline constexpr int64_t kTorchStepLimit = int64_t{1} << 24;

// The OptimizerScalars of ApplyUpdate(p, step, ...). Aborts on step < 1, as
// ApplyUpdate does.
OptimizerScalars MakeOptimizerScalars(const OptimizerParams& p, int64_t step);

}  // namespace tessel

#endif  // TESSEL_CORE_OPTIMIZER_SCALARS_H_
