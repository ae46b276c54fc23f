// Helpers shared by the worker SDK's multi-rank tests (worker_test,
// host_aggregation_test): ranks as threads, and waiting for a checkpoint.
#ifndef TESSEL_WORKER_WORKER_TESTING_H_
#define TESSEL_WORKER_WORKER_TESTING_H_

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "worker/worker.h"

namespace tessel {

// Runs `body(rank)` on `world` threads and waits for all.
inline void OnRanks(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Waits (up to 5 s) until the job's newest complete checkpoint is `step`:
// checkpoints are written in the background, and a test that restarts a
// server needs this one to roll back to.
inline absl::Status AwaitCompleteCheckpoint(Worker& worker, int64_t step) {
  for (int i = 0; i < 500; ++i) {
    TESSEL_ASSIGN_OR_RETURN(auto steps, worker.CompleteCheckpointSteps());
    if (!steps.empty() && steps.back() == step) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("no complete checkpoint of step ", step));
}

}  // namespace tessel

#endif  // TESSEL_WORKER_WORKER_TESTING_H_
