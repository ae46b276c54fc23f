// What a worker process does on SIGTERM (preemption, `kubectl delete pod`, a
// scale-down): it finishes the step in progress, asks the servers for a
// checkpoint at the next step boundary, runs that one more step, leaves the
// job and exits with kTerminatedExit (128 + SIGTERM: an Indexed Job retries
// the index, and its replacement recovers from that checkpoint, losing
// nothing). The extra step cannot finish when the servers are going away too
// (a whole deployment deleted at once), so a watchdog exits the process
// `grace` after SIGTERM wherever it is, before Kubernetes' SIGKILL at the
// pod's terminationGracePeriodSeconds.
//
// Threads: InstallPreemptionHandler once, from main; a Preemption on the
// thread that drives the Worker. The watchdog is a detached thread.
//
// Example:
//   InstallPreemptionHandler(absl::Seconds(20));
//   Preemption preemption;
//   for (int64_t k = worker->step(); k < steps; ++k) {
//     absl::Status s = ...one step...;
//     if (!s.ok() && Worker::IsRecoverable(s)) {
//       if (int rc = preemption.AfterFailedStep(worker); rc >= 0) return rc;
//       ...recover...
//     }
//     if (int rc = preemption.AfterStep(worker); rc >= 0) return rc;
//   }
#ifndef TESSEL_TOOLS_INTERNAL_PREEMPTION_H_
#define TESSEL_TOOLS_INTERNAL_PREEMPTION_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tessel {

class Worker;  // worker/worker.h

// The exit status after SIGTERM (128 + 15).
inline constexpr int kTerminatedExit = 143;
// The exit status of a worker evicted as a straggler (--straggler_policy=evict,
// Worker::straggler_evicted): it left the job at a checkpoint on purpose.
inline constexpr int kEvictedExit = 3;

// Notes SIGTERM (TerminationRequested) and starts the watchdog that exits
// with kTerminatedExit `grace` after it arrives.
void InstallPreemptionHandler(absl::Duration grace);
// Whether SIGTERM has arrived.
bool TerminationRequested();

// After each step: whether to go on (-1) or exit (the status to exit with).
class Preemption {
 public:
  // `terminated` says whether SIGTERM arrived (tests pass their own). The
  // same steps serve a worker evicted as a straggler: `why` names the reason
  // in what it says, `exit_status` is what it returns.
  explicit Preemption(std::function<bool()> terminated = TerminationRequested,
                      std::string why = "SIGTERM", int exit_status = kTerminatedExit);

  // After a completed step (`step` is the worker's step now): -1 without
  // SIGTERM. The first call after it asks for a checkpoint at step + 1
  // (`request_checkpoint`) and goes on for that one more step, or exits at
  // once if none can be had; once the worker reaches the step asked for, it
  // exits. Each decision is said on stderr.
  int AfterStep(int64_t step, int rank, const std::function<absl::Status()>& request_checkpoint);
  int AfterStep(Worker* worker);
  // A step failed recoverably after SIGTERM: another worker left first (a
  // whole Job being deleted), so the step asked for cannot complete; the
  // checkpoint the first leaver asked for is the job's. Exits now rather
  // than wait in a recovery until the grace period ends; -1 without SIGTERM.
  int AfterFailedStep(int64_t step, int rank);
  int AfterFailedStep(Worker* worker);

 private:
  const std::function<bool()> terminated_;
  const std::string why_;
  const int exit_status_;
  int64_t requested_step_ = -1;  // the checkpoint step asked for; -1: none yet
};

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_PREEMPTION_H_
