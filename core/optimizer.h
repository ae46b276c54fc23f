// Optimizer update kernels: SGD, Adam, AdamW, RMSprop and Adagrad update
// rules over flat float arrays, numerically following PyTorch 1.13
// `torch.optim` (single-tensor path, foreach=False, maximize=False,
// amsgrad=False, differentiable=False, dense fp32 parameters and gradients).
// The configuration and the state layout are core/optimizer_params.h's; the
// per-step scalars core/optimizer_scalars.h's; reductions over ranks, and the
// fused reduce-then-update, core/reduce.h's.
//
// Contract:
//   - One call updates n contiguous parameters in place, or out of place
//     (OptimizerUpdate::Run(in, out, ...): read from in, written to out,
//     bitwise the same results; a shard keeps the previous version that
//     way, server/served_versions.h). The caller owns all buffers; nothing
//     is allocated on the heap, no threads, no I/O; any thread may call, on
//     buffers no other thread touches meanwhile.
//   - state[k] points to n floats for slot k < StateSlots(p), in
//     core/optimizer_params.h's slot order, initialised by InitState.
//   - `step` >= 1 is torch's state['step'] after its increment
//     (core/optimizer_scalars.h says what each kind does with it).
//   - The scalars are MakeOptimizerScalars(p, step); the per-element
//     arithmetic is float, in torch's operation order, never contracted into
//     FMAs. Results are therefore bitwise reproducible on every x86-64 CPU and
//     independent of n, alignment, how a range is split into calls, and which
//     vector width the kernel picked at run time. They can differ from torch's
//     own CPU kernels by an ulp or so: torch's AVX2 build computes
//     `self.add(other, alpha=a)` as fma(other, a, self) and
//     `self.addcmul(t1, t2, value=v)` as fma(v * t1, t2, self).
//     tools/gen_optim_golden.py checks, bit for bit, that this order with
//     those FMAs is exactly what torch computes.
//   - params, grad and each state array must not overlap one another.
//   - The kernels assume ValidateOptimizerParams(p) passed, and abort on a
//     step < 1.
//
// Example:
//   TESSEL_RETURN_IF_ERROR(ValidateOptimizerParams(p));
//   ... state as in core/optimizer_params.h, InitState(p, state, n) ...
//   for (int64_t step = 1; step <= num_steps; ++step) {
//     ApplyUpdate(p, step, weights.data(), grad.data(), state, n);
//   }
#ifndef TESSEL_CORE_OPTIMIZER_H_
#define TESSEL_CORE_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "core/optimizer_params.h"
#include "core/optimizer_scalars.h"

namespace tessel {

// One optimizer update of n contiguous parameters, in place:
// OptimizerUpdate(p, step).Run(params, grad, state, 0, n).
void ApplyUpdate(const OptimizerParams& p, int64_t step, float* params, const float* grad,
                 float* const* state, size_t n);

// One update prepared for step `step`: the scalars (MakeOptimizerScalars) and
// the kernel choice made once, then run over any number of disjoint ranges of
// the same parameters, with the very same bits as one ApplyUpdate over their
// union. ReduceAndApply (core/reduce.h) runs one per block. Immutable once
// built: Run may be called from several threads on disjoint ranges.
//
// Example:
//   const OptimizerUpdate update(p, step);
//   for (size_t off = 0; off < n; off += kBlock) {
//     const size_t len = std::min(kBlock, n - off);
//     update.Run(params + off, grad_block, state, off, len);
//   }
class OptimizerUpdate {
 public:
  // Aborts on step < 1.
  OptimizerUpdate(const OptimizerParams& p, int64_t step);

  // Updates params[0, n) from grad[0, n); slot k's state of params[i] is
  // state[k][state_offset + i].
  void Run(float* params, const float* grad, float* const* state, size_t state_offset,
           size_t n) const {
    Run(params, params, grad, state, state_offset, n);
  }
  // Out of place: reads the parameters from in[0, n) and writes the updated
  // ones to out[0, n), the very bits the in-place Run leaves in params
  // (in is left as it was). in == out is the in-place update; otherwise in
  // and out must not overlap, nor either of them the gradient or the state.
  void Run(const float* in, float* out, const float* grad, float* const* state, size_t state_offset,
           size_t n) const;
  // The same with the gradient (a[i] + b[i]) / divisor, computed in the
  // kernel's pass (core/reduce.h's last rank added and the division, never
  // stored): bitwise Run over that mean stored first. a and b must not
  // overlap params (in, out) or the state.
  void RunMean(float* params, const float* a, const float* b, float divisor, float* const* state,
               size_t state_offset, size_t n) const {
    RunMean(params, params, a, b, divisor, state, state_offset, n);
  }
  void RunMean(const float* in, float* out, const float* a, const float* b, float divisor,
               float* const* state, size_t state_offset, size_t n) const;

  const OptimizerScalars& scalars() const { return s_; }

 private:
  OptimizerParams::Kind kind_;
  OptimizerScalars s_;
};

}  // namespace tessel

#endif  // TESSEL_CORE_OPTIMIZER_H_
