// The sticky error of a device's asynchronous work: the first failure
// recorded wins and is kept for good; later ones are dropped. The CUDA device
// returns it from every Synchronize* (device.h: "an asynchronous failure is
// sticky").
//
// It keeps the failure's code and message, and Get builds a status of its
// own for each caller: no absl::Status is shared between threads. (Debian's
// Abseil drops a shared status's references in uninstrumented code, which
// ThreadSanitizer reads as a race; see transport's DataChannel.) The lock is
// a std::mutex for the same reason: Debian's absl::Mutex is visible to TSan
// only through //third_party/absl_tsan's shim, which //gpu does not link.
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

#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace tessel::gpu::internal {

class FirstError {
 public:
  // Keeps `status` if it is the first non-OK one; an OK status is ignored.
  void Record(const absl::Status& status) {
    if (status.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (code_ != absl::StatusCode::kOk) return;
    code_ = status.code();
    message_ = std::string(status.message());
  }
  // OK until something was recorded; then always that.
  absl::Status Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::Status(code_, message_);
  }

 private:
  mutable std::mutex mu_;
  absl::StatusCode code_ = absl::StatusCode::kOk;  // guarded by mu_
  std::string message_;                            // guarded by mu_
};

}  // namespace tessel::gpu::internal

#endif  // TESSEL_GPU_INTERNAL_FIRST_ERROR_H_
