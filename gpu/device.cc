#include "gpu/device.h"

#include "absl/strings/str_cat.h"
#include "gpu/optimizer_kernels.h"

namespace tessel {

absl::Status ApplyUpdateOnDevice(const OptimizerParams& p, int64_t step, float* params,
                                 const float* grad, float* const* state, size_t n) {
  CudaInfo info = DetectCuda();
  if (!info.available) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA path unavailable (", info.reason, "); use the CPU kernels"));
  }
  if (p.kind != OptimizerParams::Kind::kSgd && p.kind != OptimizerParams::Kind::kAdam &&
      p.kind != OptimizerParams::Kind::kAdamW) {
    return absl::UnimplementedError(absl::StrCat("no CUDA kernel for ", OptimizerKindName(p.kind),
                                                 " yet; use the CPU kernels"));
  }
  const int kind = p.kind == OptimizerParams::Kind::kSgd    ? 0
                   : p.kind == OptimizerParams::Kind::kAdam ? 1
                                                            : 2;
  const int slots = StateSlots(p);
  int e = TesselCudaApplyUpdate(kind, p.lr, p.momentum, p.dampening, p.nesterov ? 1 : 0,
                                p.weight_decay, p.beta1, p.beta2, p.eps, step, params, grad,
                                slots > 0 ? state[0] : nullptr, slots > 1 ? state[1] : nullptr, n);
  if (e != 0) return absl::InternalError(absl::StrCat("CUDA optimizer update failed: error ", e));
  return absl::OkStatus();
}

}  // namespace tessel
