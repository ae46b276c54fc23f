#include "tools/internal/preemption.h"

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/time/clock.h"
#include "worker/worker.h"

namespace tessel {
namespace {

volatile std::sig_atomic_t g_terminate = 0;
void OnTerminate(int) { g_terminate = 1; }

}  // namespace

void InstallPreemptionHandler(absl::Duration grace) {
  std::signal(SIGTERM, OnTerminate);
  std::thread([grace] {
    while (!g_terminate) absl::SleepFor(absl::Milliseconds(100));
    absl::SleepFor(grace);
    std::cerr << "tessel-train: SIGTERM: not done within --preempt_grace_s ("
              << absl::FormatDuration(grace) << "); exiting now\n";
    std::_Exit(kTerminatedExit);
  }).detach();
}

bool TerminationRequested() { return g_terminate != 0; }

Preemption::Preemption(std::function<bool()> terminated, std::string why, int exit_status)
    : terminated_(std::move(terminated)), why_(std::move(why)), exit_status_(exit_status) {}

int Preemption::AfterStep(int64_t step, int rank,
                          const std::function<absl::Status()>& request_checkpoint) {
  if (!terminated_()) return -1;
  if (requested_step_ < 0) {
    absl::Status s = request_checkpoint();
    if (s.ok()) {
      requested_step_ = step + 1;
      std::cerr << "tessel-train: " << why_ << ": rank " << rank
                << " asked for a checkpoint at step " << requested_step_
                << "; one more step, then leaving\n";
      return -1;
    }
    std::cerr << "tessel-train: " << why_ << ": no checkpoint (" << s.message()
              << "); leaving after step " << step << "\n";
    return exit_status_;
  }
  if (step < requested_step_) return -1;
  std::cerr << "tessel-train: " << why_ << ": rank " << rank << " leaves at step " << step
            << " (checkpoint at step " << requested_step_ << ")\n";
  return exit_status_;
}

int Preemption::AfterStep(Worker* worker) {
  return AfterStep(worker->step(), worker->rank(),
                   [worker] { return worker->RequestCheckpoint(); });
}

int Preemption::AfterFailedStep(int64_t step, int rank) {
  if (!terminated_()) return -1;
  std::cerr << "tessel-train: " << why_ << ": rank " << rank << " leaves at step " << step
            << " (another worker left first; its checkpoint is the job's)\n";
  return exit_status_;
}

int Preemption::AfterFailedStep(Worker* worker) {
  return AfterFailedStep(worker->step(), worker->rank());
}

}  // namespace tessel
