// The demo MLP as the SDK's per-unit step recipe (worker/unit_step.h) sees
// it, one unit per layer: MlpUnits computes on the CPU over the batch of one
// step; DeviceMlpUnits on a gpu::Device (model/device_mlp.h). Each of
// DeviceMlpUnits' calls gets host pointers valid only until it returns (the
// unit is released, the gradients pushed right after), so it copies them on
// the compute stream and waits for its copies before returning; the first
// device error is kept (status()) and the loss is then NaN. On the "host"
// device both compute the same bits.
//
// Threads: the thread that drives the Worker.
//
// Example:
//   MlpUnits model(job, step, rank, world);
//   TESSEL_RETURN_IF_ERROR(UnitStep(*worker, model, &loss));
//
//   DeviceMlpUnits on_device(mlp.get(), device, unit_params.data(), unit_grads.data());
//   TESSEL_RETURN_IF_ERROR(on_device.SetBatch(job.Batch(step, rank, world)));
//   TESSEL_RETURN_IF_ERROR(UnitStep(*worker, on_device, &loss));
//   TESSEL_RETURN_IF_ERROR(on_device.status());
#ifndef TESSEL_TOOLS_INTERNAL_MLP_UNITS_H_
#define TESSEL_TOOLS_INTERNAL_MLP_UNITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "gpu/device.h"
#include "model/dataset.h"
#include "model/device_mlp.h"
#include "model/mlp.h"
#include "tools/internal/mlp_job.h"
#include "worker/unit_step.h"

namespace tessel {

// The batch of step `k` for `rank` of `world`, on the CPU.
class MlpUnits : public UnitModel {
 public:
  MlpUnits(const MlpJob& job, int64_t k, int rank, int world);
  void Forward(int unit, const float* params) override { stepper_.Forward(unit, params); }
  float Loss() override { return stepper_.Loss(); }
  void Backward(int unit, const float* params, float* grads) override {
    stepper_.Backward(unit, params, grads);
  }

 private:
  model::Dataset batch_;  // before stepper_, which points into it
  model::MlpStepper stepper_;
};

// `mlp` on `device`; `layer_params` and `layer_grads` are device buffers
// that hold the widest layer's parameters.
class DeviceMlpUnits : public UnitModel {
 public:
  DeviceMlpUnits(model::DeviceMlp* mlp, gpu::Device* device, float* layer_params,
                 float* layer_grads)
      : mlp_(mlp), device_(device), params_(layer_params), grads_(layer_grads) {}
  absl::Status SetBatch(const model::Dataset& batch) {
    return mlp_->SetBatch(batch.x.data(), batch.y.data());
  }
  void Forward(int unit, const float* params) override;
  float Loss() override;
  void Backward(int unit, const float* params, float* grads) override;
  // The first device error of the calls so far.
  const absl::Status& status() const { return status_; }

 private:
  size_t Bytes(int unit) const { return mlp_->model().LayerRange(unit).second * sizeof(float); }
  void Upload(int unit, const float* params);
  void Sync();
  void Note(const absl::Status& s);

  model::DeviceMlp* mlp_;
  gpu::Device* device_;
  float* params_;
  float* grads_;
  absl::Status status_;
};

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_MLP_UNITS_H_
