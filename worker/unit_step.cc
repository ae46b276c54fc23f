#include "worker/unit_step.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

// A unit's parameters as fp32 for the model: the gathered view, or under
// mixed precision the gathered half values widened into `scratch`.
absl::StatusOr<const float*> GatherForCompute(Worker& worker, int unit,
                                              std::vector<float>* scratch) {
  const auto half = worker.half_type();
  if (!half) {
    TESSEL_ASSIGN_OR_RETURN(auto params, worker.Gather(unit));
    return params.data();
  }
  TESSEL_ASSIGN_OR_RETURN(auto params, worker.GatherHalf(unit));
  scratch->resize(params.size());
  HalfToFloat(*half, params.data(), scratch->data(), params.size());
  return static_cast<const float*>(scratch->data());
}

// Unit `unit`'s backward into its push buffer (rounded to half under mixed
// precision).
void BackwardInto(Worker& worker, UnitModel& model, int unit, const float* params,
                  std::vector<float>* scratch) {
  const auto half = worker.half_type();
  if (!half) {
    model.Backward(unit, params, worker.UnitGrads(unit).data());
    return;
  }
  absl::Span<uint16_t> out = worker.UnitHalfGrads(unit);
  scratch->assign(out.size(), 0.f);
  model.Backward(unit, params, scratch->data());
  FloatToHalf(*half, scratch->data(), out.data(), out.size());
}

absl::Status FsdpStep(Worker& worker, UnitModel& model, float* loss) {
  const int units = worker.num_units();
  std::vector<float> params_fp32, grads_fp32;  // mixed precision: one unit, widened
  absl::Status s = worker.Prefetch(0);
  for (int u = 0; u < units && s.ok(); ++u) {
    TESSEL_ASSIGN_OR_RETURN(auto params, GatherForCompute(worker, u, &params_fp32));
    if (u + 1 < units) s = worker.Prefetch(u + 1);
    model.Forward(u, params);
    worker.Release(u);
  }
  TESSEL_RETURN_IF_ERROR(s);
  *loss = model.Loss();
  s = worker.Prefetch(units - 1);
  for (int u = units - 1; u >= 0 && s.ok(); --u) {
    TESSEL_ASSIGN_OR_RETURN(auto params, GatherForCompute(worker, u, &params_fp32));
    if (u > 0) s = worker.Prefetch(u - 1);
    BackwardInto(worker, model, u, params, &grads_fp32);
    worker.Release(u);
    if (s.ok()) s = worker.PushUnit(u);
  }
  if (s.ok()) s = worker.FinishStep();
  return s;
}

absl::Status Zero2UnitStep(Worker& worker, UnitModel& model, float* loss) {
  const auto half = worker.half_type();
  std::vector<float> widened, grads_fp32;
  if (half) {
    widened.resize(worker.half_params().size());
    HalfToFloat(*half, worker.half_params().data(), widened.data(), widened.size());
  }
  const float* params = half ? widened.data() : worker.params().data();
  const int units = worker.num_units();
  for (int u = 0; u < units; ++u) model.Forward(u, params + worker.unit_range(u).begin);
  *loss = model.Loss();
  for (int u = units - 1; u >= 0; --u) {
    BackwardInto(worker, model, u, params + worker.unit_range(u).begin, &grads_fp32);
    TESSEL_RETURN_IF_ERROR(worker.PushUnit(u));
  }
  return worker.Step();
}

}  // namespace

absl::Status UnitStep(Worker& worker, UnitModel& model, float* loss) {
  const WorkerOptions& o = worker.options();
  if (o.strategy == Strategy::kFsdp) return FsdpStep(worker, model, loss);
  if (o.strategy == Strategy::kZero2 && !o.fsdp_units.empty()) {
    return Zero2UnitStep(worker, model, loss);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("UnitStep is for fsdp and zero2 with units; strategy ", StrategyName(o.strategy),
                   " steps with grads()/GradientsReady()/Step()"));
}

}  // namespace tessel
