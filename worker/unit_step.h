// UnitStep: the SDK's recipe for one training step of a model made of units
// (WorkerOptions::fsdp_units: consecutive groups of tensors, e.g. one per
// layer) under the strategies that keep memory per unit:
//   fsdp           each unit's parameters are gathered just before its
//                  forward (the next unit prefetched meanwhile) and again
//                  before its backward, released after each use; each unit's
//                  gradients are pushed right after its backward; FinishStep.
//   zero2 + units  forward over the full parameters; each unit's backward
//                  writes its own gradient buffer, pushed (and freed once
//                  sent) right away, so no full-model gradient buffer exists;
//                  Step pulls the parameters.
// Mixed precision (fp16/bf16): the model computes in fp32 from the half
// parameters widened, and each unit's gradients are rounded to half before
// the push. The result is bitwise the same as the single-process reference
// computing the same way.
//
// The model sees only fp32 pointers: Forward(u, params of u), Loss(), then
// Backward(u, params of u, zeroed gradients of u) for u from last to first.
//
// Example:
//   MyLayers model(batch);                   // implements UnitModel
//   float loss = NAN;
//   absl::Status s = UnitStep(*worker, model, &loss);
//   if (Worker::IsRecoverable(s)) s = worker->Recover();
#ifndef TESSEL_WORKER_UNIT_STEP_H_
#define TESSEL_WORKER_UNIT_STEP_H_

#include "absl/status/status.h"
#include "worker/worker.h"

namespace tessel {

// A model as the recipe drives it, one batch at a time.
class UnitModel {
 public:
  virtual ~UnitModel() = default;
  // Unit `unit`'s forward from its parameters (fp32, the unit's range).
  virtual void Forward(int unit, const float* params) = 0;
  // The batch's loss, after every unit's forward.
  virtual float Loss() = 0;
  // Unit `unit`'s backward: writes its gradients into `grads` (zeroed, the
  // unit's range), units from last to first.
  virtual void Backward(int unit, const float* params, float* grads) = 0;
};

// One step of `worker` (fsdp, or zero2 with units) over `model`. `*loss` is
// set as soon as the forward pass ran, so a step that fails afterwards (a
// recovery) still tells what it computed. FailedPrecondition for other
// strategies: they use grads()/GradientsReady()/Step().
absl::Status UnitStep(Worker& worker, UnitModel& model, float* loss);

}  // namespace tessel

#endif  // TESSEL_WORKER_UNIT_STEP_H_
