#include "worker/internal/worker_metrics.h"

#include "absl/strings/str_cat.h"

namespace tessel::internal {
namespace {

struct Families {
  metrics::Registry& r = metrics::Default();
  metrics::Family& step_seconds = r.AddHistogram(
      "tessel_worker_step_seconds", "time from one training step's end to the next's",
      {"job", "rank"}, metrics::ExponentialBuckets(100e-6, 2, 20));
  metrics::Family& phase_seconds = r.AddHistogram(
      "tessel_worker_step_phase_seconds",
      "a step's exchange phases: push, wait (reduction and optimizer), pull; update (DDP)",
      {"job", "rank", "phase"}, metrics::ExponentialBuckets(10e-6, 2, 22));
  metrics::Family& step = r.AddGauge("tessel_worker_step", "steps completed", {"job", "rank"});
  metrics::Family& recoveries = r.AddCounter(
      "tessel_worker_recoveries_total", "recoveries this worker took part in", {"job", "rank"});
  metrics::Family& recovery_seconds =
      r.AddHistogram("tessel_worker_recovery_seconds", "time of one recovery", {"job", "rank"},
                     metrics::ExponentialBuckets(1e-3, 2, 18));
  metrics::Family& rolled_back =
      r.AddCounter("tessel_worker_rolled_back_steps_total",
                   "steps done again after recoveries rolled back", {"job", "rank"});
  metrics::Family& unauthenticated =
      r.AddCounter("tessel_worker_unauthenticated_frames_total",
                   "data-path frames dropped for a missing or wrong tag (data-path authentication)",
                   {"job", "rank"});
  metrics::Family& evicted = r.AddCounter(
      "tessel_worker_straggler_evictions_total",
      "times this worker was evicted as the job's slowest straggler (--straggler_policy=evict)",
      {"job", "rank"});
};

Families& F() {
  static Families* f = new Families();
  return *f;
}

}  // namespace

WorkerMetrics::WorkerMetrics(const std::string& job, int rank) {
  Families& f = F();
  const std::string r = absl::StrCat(rank);
  step_seconds_ = f.step_seconds.GetHistogram({job, r});
  push_ = f.phase_seconds.GetHistogram({job, r, "push"});
  wait_ = f.phase_seconds.GetHistogram({job, r, "wait"});
  pull_ = f.phase_seconds.GetHistogram({job, r, "pull"});
  update_ = f.phase_seconds.GetHistogram({job, r, "update"});
  step_ = f.step.GetGauge({job, r});
  recoveries_ = f.recoveries.GetCounter({job, r});
  recovery_seconds_ = f.recovery_seconds.GetHistogram({job, r});
  rolled_back_ = f.rolled_back.GetCounter({job, r});
  unauthenticated_ = f.unauthenticated.GetCounter({job, r});
  evicted_ = f.evicted.GetCounter({job, r});
}

void WorkerMetrics::Evicted() { evicted_->Add(); }

void WorkerMetrics::Unauthenticated(int64_t total) {
  if (total > unauthenticated_seen_) {
    unauthenticated_->Add(static_cast<double>(total - unauthenticated_seen_));
    unauthenticated_seen_ = total;
  }
}

void WorkerMetrics::StepDone(int64_t step, const StepPhases& phases, double update_seconds) {
  const auto now = std::chrono::steady_clock::now();
  if (last_end_.has_value()) {
    step_seconds_->Observe(std::chrono::duration<double>(now - *last_end_).count());
  }
  last_end_ = now;
  if (phases.push_ns + phases.wait_ns + phases.pull_ns > 0) {
    push_->Observe(phases.push_ns * 1e-9);
    wait_->Observe(phases.wait_ns * 1e-9);
    pull_->Observe(phases.pull_ns * 1e-9);
  }
  if (update_seconds > 0) update_->Observe(update_seconds);
  step_->Set(static_cast<double>(step));
}

void WorkerMetrics::Recovered(double seconds, int64_t from, int64_t to) {
  recoveries_->Add();
  recovery_seconds_->Observe(seconds);
  if (to < from) rolled_back_->Add(static_cast<double>(from - to));
  last_end_.reset();  // the next step's time would include the recovery
}

}  // namespace tessel::internal
