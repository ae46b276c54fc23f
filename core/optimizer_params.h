// Optimizer configuration: the hyperparameters of SGD, Adam, AdamW, RMSprop
// and Adagrad with torch.optim 1.13's names and defaults, their validation,
// and the layout of the per-parameter optimizer state the update kernels
// (core/optimizer.h) read and write.
//
// Contract:
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
//   - Call ValidateOptimizerParams once when the configuration arrives; the
//     kernels assume valid parameters.
//   - Pure functions: no allocation beyond error messages, no threads, no I/O;
//     callable from any thread.
//
// Example:
//   OptimizerParams p;
//   p.kind = OptimizerParams::Kind::kAdamW;
//   p.lr = 1e-3f;
//   p.weight_decay = 0.01f;
//   TESSEL_RETURN_IF_ERROR(ValidateOptimizerParams(p));
//   std::vector<std::vector<float>> slots(StateSlots(p), std::vector<float>(n));
//   float* state[kMaxStateSlots] = {};
//   for (int k = 0; k < StateSlots(p); ++k) state[k] = slots[k].data();
//   InitState(p, state, n);
#ifndef TESSEL_CORE_OPTIMIZER_PARAMS_H_
#define TESSEL_CORE_OPTIMIZER_PARAMS_H_

#include <cstddef>

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

}  // namespace tessel

#endif  // TESSEL_CORE_OPTIMIZER_PARAMS_H_
