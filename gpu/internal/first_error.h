// The sticky error of a device's asynchronous work: the first failure
// recorded wins and is kept for good; later ones are dropped. The CUDA device
// returns it from every Synchronize* (device.h: "an asynchronous failure is
// sticky").
//
// Thread safety: Record and Get may be called from any thread (mu_).
//
// Example:
//   FirstError errors;
//   errors.Record(absl::InternalError("CUDA: ... in Pack"));
//   errors.Record(absl::InternalError("later"));   // dropped
//   return errors.Get();                            // the Pack failure
#ifndef TESSEL_GPU_INTERNAL_FIRST_ERROR_H_
#define TESSEL_GPU_INTERNAL_FIRST_ERROR_H_

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessel::gpu::internal {

class FirstError {
 public:
  // Keeps `status` if it is the first non-OK one; an OK status is ignored.
  void Record(absl::Status status) {
    if (status.ok()) return;
    absl::MutexLock lock(&mu_);
    if (first_.ok()) first_ = std::move(status);
  }
  // OK until something was recorded; then always that.
  absl::Status Get() const {
    absl::MutexLock lock(&mu_);
    return first_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status first_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_FIRST_ERROR_H_
