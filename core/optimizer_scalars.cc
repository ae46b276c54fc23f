#include "core/optimizer_scalars.h"

#include <algorithm>
#include <cmath>

#include "core/internal/kernel_support.h"
#include "core/optimizer_params.h"

namespace tessel {
namespace {

using Kind = OptimizerParams::Kind;

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

}  // namespace

OptimizerScalars MakeOptimizerScalars(const OptimizerParams& p, int64_t step) {
  if (step < 1) {
    internal::KernelFatal("ApplyUpdate: step must be >= 1 (torch's state['step'] after increment)");
  }
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

}  // namespace tessel
