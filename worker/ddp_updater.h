// DdpUpdater: DDP's local optimizer step done by the caller instead of the
// worker (Worker::SetDdpUpdater), e.g. on a GPU that keeps the parameters and
// optimizer state in device memory (worker/device_staging.h).
#ifndef TESSEL_WORKER_DDP_UPDATER_H_
#define TESSEL_WORKER_DDP_UPDATER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/layout.h"
#include "core/optimizer_params.h"

namespace tessel {

// DDP's local update done by the caller, e.g. on a GPU (worker/device_staging.h),
// which then holds the parameters and optimizer state that count; the
// worker's own copies (params(), the state it serializes) are refreshed from
// it with Store before the worker reads them, and handed back with Load
// after the worker changed them. Worker::SetDdpUpdater installs one.
class DdpUpdater {
 public:
  // Elements [range.begin, range.end) updated at their own step count
  // (core/tensor_steps.h: a tensor skipped by SkipTensors counts only its
  // updates).
  struct Run {
    Range range;
    int64_t step = 0;
  };
  virtual ~DdpUpdater() = default;
  // Step()'s update: the mean gradient of the step is in grads() (mixed
  // precision: half_grads()); apply `optimizer` (core/optimizer.h's
  // ApplyUpdate) to each run, in order, and to nothing else. An error fails
  // Step() (not recoverably: the state is unknown).
  virtual absl::Status Apply(const OptimizerParams& optimizer, absl::Span<const Run> runs) = 0;
  // Copy the fp32 parameters (num_params floats) and every optimizer state
  // slot (StateSlots(optimizer) arrays of num_params floats) into these host
  // arrays, once pending updates are done.
  virtual absl::Status Store(float* params, absl::Span<float* const> slots) = 0;
  // Take these parameters and state (the worker changed them: Deserialize, a
  // state broadcast from another rank).
  virtual absl::Status Load(const float* params, absl::Span<const float* const> slots) = 0;
};

}  // namespace tessel

#endif  // TESSEL_WORKER_DDP_UPDATER_H_
