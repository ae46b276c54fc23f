#include "tools/internal/mlp_units.h"

#include <limits>

namespace tessel {

MlpUnits::MlpUnits(const MlpJob& job, int64_t k, int rank, int world)
    : batch_(job.Batch(k, rank, world)),
      stepper_(job.model(), batch_.x.data(), batch_.y.data(), job.config().batch) {}

void DeviceMlpUnits::Forward(int unit, const float* params) {
  Upload(unit, params);
  mlp_->Forward(unit, params_);
  Sync();  // `params` is released when this returns
}

float DeviceMlpUnits::Loss() {
  absl::StatusOr<float> loss = mlp_->Loss();
  if (!loss.ok()) {
    Note(loss.status());
    return std::numeric_limits<float>::quiet_NaN();
  }
  return *loss;
}

void DeviceMlpUnits::Backward(int unit, const float* params, float* grads) {
  Upload(unit, params);
  mlp_->Backward(unit, params_, grads_);
  device_->CopyToHost(gpu::Stream::kCompute, grads, grads_, Bytes(unit));
  Sync();  // `grads` is pushed when this returns
}

void DeviceMlpUnits::Upload(int unit, const float* params) {
  device_->CopyToDevice(gpu::Stream::kCompute, params_, params, Bytes(unit));
}

void DeviceMlpUnits::Sync() { Note(device_->SynchronizeStream(gpu::Stream::kCompute)); }

void DeviceMlpUnits::Note(const absl::Status& s) {
  if (status_.ok() && !s.ok()) status_ = s;
}

}  // namespace tessel
