// A worker's Prometheus metrics (served when WorkerOptions.metrics_address,
// tessel-train --metrics_address, is set):
//   tessel_worker_step_seconds{job,rank}           time from one step's end to the
//                                                  next's: compute plus exchange
//   tessel_worker_step_phase_seconds{job,rank,phase}  push (handing buckets to
//       the transport), wait (for the servers' reduction and optimizer),
//       pull (receiving the parameters), update (DDP's local optimizer step)
//   tessel_worker_step{job,rank}                   steps completed
//   tessel_worker_recoveries_total{job,rank}
//   tessel_worker_recovery_seconds{job,rank}
//   tessel_worker_rolled_back_steps_total{job,rank}  steps redone after recoveries
// The SDK's internal reduce-only jobs record none.
//
// Threads: the driving thread calls it; the series are updated atomically
// and read by the metrics endpoint's thread (runtime/metrics.h).
//
// Example:
//   WorkerMetrics metrics(options.job, rank);
//   metrics.StepDone(step, exchange.last_phases(), /*update_seconds=*/0);
//   metrics.Recovered(seconds, /*from=*/12, /*to=*/10);  // two steps rolled back
#ifndef TESSEL_WORKER_INTERNAL_WORKER_METRICS_H_
#define TESSEL_WORKER_INTERNAL_WORKER_METRICS_H_

#include <chrono>
#include <optional>
#include <string>

#include "runtime/metrics.h"
#include "worker/reports.h"

namespace tessel::internal {

class WorkerMetrics {
 public:
  WorkerMetrics(const std::string& job, int rank);

  // A step ended at `step` with these exchange phases (and DDP's local update).
  void StepDone(int64_t step, const StepPhases& phases, double update_seconds);
  // A recovery took `seconds` and moved the worker from `from` to step `to`.
  void Recovered(double seconds, int64_t from, int64_t to);
  // The data channel has dropped `total` unauthenticated frames so far.
  void Unauthenticated(int64_t total);
  // The worker was evicted as a straggler (Worker::straggler_evicted).
  void Evicted();

 private:
  metrics::Histogram* step_seconds_;
  metrics::Histogram* push_;
  metrics::Histogram* wait_;
  metrics::Histogram* pull_;
  metrics::Histogram* update_;
  metrics::Gauge* step_;
  metrics::Counter* recoveries_;
  metrics::Histogram* recovery_seconds_;
  metrics::Counter* rolled_back_;
  metrics::Counter* unauthenticated_;
  metrics::Counter* evicted_;
  int64_t unauthenticated_seen_ = 0;
  std::optional<std::chrono::steady_clock::time_point> last_end_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_WORKER_METRICS_H_
