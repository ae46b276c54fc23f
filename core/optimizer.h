// Optimizer kernels: SGD, Adam and AdamW update rules over flat float arrays,
// numerically following PyTorch 1.13 `torch.optim` (single-tensor path,
// foreach=False, maximize=False, amsgrad=False, fp32 parameters).
//
// Contract:
//   - One call updates n contiguous parameters in place. The caller owns all
//     buffers; nothing is allocated on the heap, no threads, no I/O.
//   - Per-parameter optimizer state lives in StateSlots(p) caller-owned arrays
//     of n floats each, zero-initialised before the first update:
//       SGD with momentum != 0: state[0] = momentum_buffer.
//       Adam / AdamW:           state[0] = exp_avg, state[1] = exp_avg_sq.
//     Other kinds ignore `state` (it may be nullptr).
//   - `step` is torch's state['step'] after its increment, i.e. 1 for the first
//     update. SGD uses it only to know that the momentum buffer is "None" yet
//     (step == 1: the buffer becomes a copy of the gradient).
//   - Scalar hyperparameters are widened to double and combined exactly as
//     torch's Python code does (1 - beta1, lr / (1 - beta1**step), ...), then
//     cast to float once per call; the per-element arithmetic is float, in
//     torch's operation order, never contracted into FMAs. Results are
//     therefore bitwise reproducible on every x86-64 CPU and independent of n,
//     alignment and which vector width the kernel picked at run time. They can
//     differ from torch's own CPU kernels by an ulp or so: torch's AVX2 build
//     contracts `self + alpha * other` (add_ with alpha, addcmul_) into fused
//     multiply-adds.
//   - torch 1.13 keeps state['step'] as a float32 tensor, which stops counting
//     at 2^24; `step` here is an int64. For betas <= 0.999997 this changes
//     nothing: beta**(2^24) < 2^-53, so both bias corrections are already
//     exactly 1.0 in double when torch's counter stalls.
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
//   std::vector<float> m(n), v(n);  // zero before the first step
//   float* state[] = {m.data(), v.data()};
//   for (int64_t step = 1; step <= num_steps; ++step) {
//     ApplyUpdate(p, step, weights.data(), grad.data(), state, n);
//   }
#ifndef TESSEL_CORE_OPTIMIZER_H_
#define TESSEL_CORE_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace tessel {

struct OptimizerParams {
  enum class Kind { kSgd, kAdam, kAdamW };
  Kind kind = Kind::kSgd;
  float lr = 1e-3f;
  // SGD only.
  float momentum = 0;
  float dampening = 0;
  bool nesterov = false;
  // SGD and Adam: L2 penalty added to the gradient. AdamW: decoupled decay,
  // params are multiplied by (1 - lr * weight_decay) before the Adam step.
  float weight_decay = 0;
  // Adam and AdamW only.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Returns "SGD", "Adam" or "AdamW".
const char* OptimizerKindName(OptimizerParams::Kind kind);

// torch's constructor checks, with torch's conditions: lr >= 0,
// weight_decay >= 0, for SGD momentum >= 0 and nesterov only with
// momentum > 0 and dampening == 0, for Adam/AdamW eps >= 0 and
// 0 <= beta1, beta2 < 1. In addition (where torch would silently accept
// them): every value must be finite, and the SGD-only fields (momentum,
// dampening, nesterov) must be left at 0/false for Adam and AdamW, since
// setting them there is almost certainly a configuration mistake.
// Returns InvalidArgument naming the field, its value and what is allowed.
absl::Status ValidateOptimizerParams(const OptimizerParams& p);

// Number of per-parameter state arrays ApplyUpdate reads and writes:
// SGD 1 if momentum != 0 else 0; Adam/AdamW 2 (exp_avg, exp_avg_sq).
int StateSlots(const OptimizerParams& p);

// One optimizer update of n contiguous parameters, in place.
// `step` >= 1 is torch's state['step'] after its increment.
// state[k] points to n floats for slot k < StateSlots(p).
void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n);

// out[i] = (srcs[0][i] + srcs[1][i] + ... + srcs[w-1][i]) / w, summed left to
// right in float and divided (not multiplied by 1/w). w >= 1. `out` may be
// exactly one of the sources (in-place reduction) but must not partially
// overlap any of them.
void ReduceMean(const float* const* srcs, int w, float* out, size_t n);

// ReduceMean into a gradient followed by ApplyUpdate, fused so the gradient
// never goes to memory. Bitwise identical to
//   ReduceMean(srcs, w, grad, n); ApplyUpdate(p, step, params, grad, state, n);
void ReduceAndApply(const OptimizerParams& p, int64_t step, float* params, const float* const* srcs,
                    int w, float* const* state, size_t n);

}  // namespace tessel

#endif  // TESSEL_CORE_OPTIMIZER_H_
