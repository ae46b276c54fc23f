// Optimizer kernels: SGD, Adam, AdamW, RMSprop and Adagrad update rules over
// flat float arrays, numerically following PyTorch 1.13 `torch.optim`
// (single-tensor path, foreach=False, maximize=False, amsgrad=False,
// differentiable=False, dense fp32 parameters and gradients).
//
// Contract:
//   - One call updates n contiguous parameters in place. The caller owns all
//     buffers; nothing is allocated on the heap, no threads, no I/O.
//   - Per-parameter optimizer state lives in StateSlots(p) <= kMaxStateSlots
//     caller-owned arrays of n floats each, in this slot order:
//       SGD with momentum != 0: state[0] = momentum_buffer.
//       Adam / AdamW:           state[0] = exp_avg, state[1] = exp_avg_sq.
//       RMSprop:                state[0] = square_avg, then momentum_buffer
//                               if momentum > 0, then grad_avg if centered
//                               (1 to 3 slots).
//       Adagrad:                state[0] = sum.
//     Kinds with no slots ignore `state` (it may be nullptr).
//   - Call InitState once on the state of fresh parameters, before their first
//     update. It writes torch's initial values: Adagrad's sum starts at
//     initial_accumulator_value, everything else at 0 (so zero-filling is
//     equivalent for every kind except Adagrad).
//   - `step` is torch's state['step'] after its increment, i.e. 1 for the first
//     update. SGD uses it only to know that the momentum buffer is "None" yet
//     (step == 1: the buffer becomes a copy of the gradient); RMSprop does not
//     use it; Adam/AdamW (bias corrections) and Adagrad (lr_decay) do.
//   - Scalar hyperparameters are widened to double and combined exactly as
//     torch's Python code does (1 - beta1, lr / (1 - beta1**step), 1 - alpha,
//     lr / (1 + (step - 1) * lr_decay), ...), then cast to float once per call;
//     the per-element arithmetic is float, in torch's operation order, never
//     contracted into FMAs. Results are therefore bitwise reproducible on every
//     x86-64 CPU and independent of n, alignment and which vector width the
//     kernel picked at run time. They can differ from torch's own CPU kernels
//     by an ulp or so: torch's AVX2 build computes `self.add(other, alpha=a)`
//     as fma(other, a, self) and `self.addcmul(t1, t2, value=v)` as
//     fma(v * t1, t2, self). tools/gen_optim_golden.py checks, bit for bit,
//     that this order with those FMAs is exactly what torch computes.
//   - torch 1.13 keeps state['step'] as a float32 tensor, which stops counting
//     at 2^24; `step` here is an int64. Adagrad reproduces the stall (its
//     learning-rate decay uses min(step, 2^24)). For Adam/AdamW with
//     betas <= 0.999997 it changes nothing: beta**(2^24) < 2^-53, so both bias
//     corrections are already exactly 1.0 in double when torch's counter
//     stalls.
//   - params, grad and each state array must not overlap one another.
//   - Call ValidateOptimizerParams once when the configuration arrives; the
//     kernels assume valid parameters and abort on a step < 1 or w < 1.
//
// Example:
//   OptimizerParams p;
//   p.kind = OptimizerParams::Kind::kAdamW;
//   p.lr = 1e-3f;
//   p.weight_decay = 0.01f;
//   if (absl::Status s = ValidateOptimizerParams(p); !s.ok()) return s;
//   std::vector<std::vector<float>> slots(StateSlots(p), std::vector<float>(n));
//   float* state[kMaxStateSlots] = {};
//   for (int k = 0; k < StateSlots(p); ++k) state[k] = slots[k].data();
//   InitState(p, state, n);
//   for (int64_t step = 1; step <= num_steps; ++step) {
//     ApplyUpdate(p, step, weights.data(), grad.data(), state, n);
//   }
#ifndef TESSEL_CORE_OPTIMIZER_H_
#define TESSEL_CORE_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace tessel {

// Largest StateSlots() of any configuration (centered RMSprop with momentum).
inline constexpr int kMaxStateSlots = 3;

// Hyperparameters, with torch's names. Fields a kind does not use must be left
// at their defaults (ValidateOptimizerParams rejects anything else).
struct OptimizerParams {
  enum class Kind { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad };
  Kind kind = Kind::kSgd;
  float lr = 1e-3f;
  // SGD and RMSprop (RMSprop: momentum buffer used when momentum > 0).
  float momentum = 0;
  // SGD only.
  float dampening = 0;
  bool nesterov = false;
  // SGD, Adam, RMSprop and Adagrad: L2 penalty added to the gradient. AdamW:
  // decoupled decay, params are multiplied by (1 - lr * weight_decay) before
  // the Adam step.
  float weight_decay = 0;
  // Adam and AdamW only.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // Adam, AdamW, RMSprop and Adagrad. The default is torch's for Adam, AdamW
  // and RMSprop; torch's Adagrad default is 1e-10, so Adagrad callers should
  // set eps explicitly.
  float eps = 1e-8f;
  // RMSprop only: smoothing constant of square_avg (and grad_avg), and whether
  // to divide by the centered (variance) estimate sqrt(E[g^2] - E[g]^2).
  float alpha = 0.99f;
  bool centered = false;
  // Adagrad only: the learning rate at step t is lr / (1 + (t - 1) * lr_decay),
  // and state `sum` starts at initial_accumulator_value (see InitState).
  float lr_decay = 0;
  float initial_accumulator_value = 0;
  // Every kind: each gradient element is multiplied by grad_scale (in float)
  // before the update. Mixed-precision loss scaling sets it to 1 / the loss
  // scale, as torch's GradScaler unscales (grad * inv_scale). At 1 (the
  // default) the gradient is used as it is, bit for bit.
  float grad_scale = 1.0f;
};

// Returns "SGD", "Adam", "AdamW", "RMSprop" or "Adagrad".
const char* OptimizerKindName(OptimizerParams::Kind kind);

// torch's constructor checks, with torch's conditions: lr >= 0,
// weight_decay >= 0; SGD: momentum >= 0, nesterov only with momentum > 0 and
// dampening == 0; Adam/AdamW: eps >= 0, 0 <= beta1, beta2 < 1; RMSprop:
// eps >= 0, alpha >= 0, momentum >= 0; Adagrad: eps >= 0, lr_decay >= 0,
// initial_accumulator_value >= 0. In addition, rejecting what torch would
// silently accept but is almost certainly a configuration mistake:
//   - every value must be finite, and grad_scale > 0;
//   - RMSprop's alpha must be <= 1 (above 1, square_avg turns negative and
//     every update NaN), and centered RMSprop needs alpha > 0 (with alpha == 0
//     its variance estimate g^2 - g^2 is 0 up to rounding: torch's FMA yields
//     NaN for about half the parameters, this library g / eps);
//   - fields the kind does not use (see OptimizerParams) must keep their
//     defaults, e.g. momentum for Adam (whose momentum is beta1), beta1 for
//     RMSprop, alpha for SGD. Only values differing from the default are
//     rejected, so callers that never touch a field are unaffected.
// Returns InvalidArgument naming the field, its value and what is allowed.
absl::Status ValidateOptimizerParams(const OptimizerParams& p);

// Number of per-parameter state arrays ApplyUpdate reads and writes, at most
// kMaxStateSlots: SGD 1 if momentum != 0 else 0; Adam/AdamW 2 (exp_avg,
// exp_avg_sq); RMSprop 1 + (momentum > 0) + centered (square_avg,
// momentum_buffer, grad_avg); Adagrad 1 (sum).
int StateSlots(const OptimizerParams& p);

// Writes torch's initial optimizer state into state[k][0, n) for every slot
// k < StateSlots(p): Adagrad's sum = initial_accumulator_value, every other
// slot of every kind 0. Call it once for fresh parameters, before the first
// ApplyUpdate/ReduceAndApply (not when resuming from saved state).
void InitState(const OptimizerParams& p, float* const* state, size_t n);

// One optimizer update of n contiguous parameters, in place.
// `step` >= 1 is torch's state['step'] after its increment.
// state[k] points to n floats for slot k < StateSlots(p).
void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n);

// What one ApplyUpdate call computes with: which terms apply, and the float
// scalars, derived from OptimizerParams and step exactly as torch's Python
// code derives them (double arithmetic on the Python floats), then rounded to
// float once, the way ATen converts a Scalar for a float tensor. ApplyUpdate
// and ReduceAndApply run on it; other implementations of the same
// per-element arithmetic (the CUDA kernels, gpu/kernels.cu) take their values
// from it so that they cannot drift apart. Fields the kind does not use stay
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

// The OptimizerScalars of ApplyUpdate(p, step, ...). Aborts on step < 1, as
// ApplyUpdate does.
OptimizerScalars MakeOptimizerScalars(const OptimizerParams& p, int64_t step);

// out[i] = (srcs[0][i] + srcs[1][i] + ... + srcs[w-1][i]) / divisor, summed
// left to right in float and divided (not multiplied by 1/divisor); divisor
// 0 means w. w >= 1. `out` may be exactly one of the sources (in-place
// reduction) but must not partially overlap any of them.
//
// Prefix order: with divisor = W, srcs[0] may be a ReduceSum of ranks
// [0, k) and srcs[1..] ranks k..W-1: the result is the same bits as the
// mean over all W ranks, because the sum is the same left-to-right fold.
void ReduceMean(const float* const* srcs, int w, float* out, size_t n, int divisor = 0);

// out[i] = srcs[0][i] + srcs[1][i] + ... + srcs[w-1][i], left to right in
// float (the first part of ReduceMean, kept for a later one). w >= 1; `out`
// may be exactly one of the sources.
void ReduceSum(const float* const* srcs, int w, float* out, size_t n);

// ReduceMean into a gradient followed by ApplyUpdate, fused so the gradient
// never goes to memory. Bitwise identical to
//   ReduceMean(srcs, w, grad, n, divisor);
//   ApplyUpdate(p, step, params, grad, state, n);
void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n, int divisor = 0);

}  // namespace tessel

#endif  // TESSEL_CORE_OPTIMIZER_H_
