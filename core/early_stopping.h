// EarlyStopping: the patience rule for stopping when a monitored metric
// (e.g. validation loss) stops improving. Pure and deterministic: fed the
// same sequence of values it makes the same decisions, which is what lets
// every rank of a job decide alike when they all feed it the job-wide mean
// (Worker::ReportMetric / ShouldEarlyStop).
//
// Rule: a value improves on the best so far if it is lower by more than
// min_delta (mode kMin) or higher by more than min_delta (kMax). After
// `patience` consecutive values without improvement, ShouldStop() is true
// and stays true. A NaN never improves (so a diverging run stops too).
//
// Example:
//   EarlyStopping stop({.patience = 3, .min_delta = 1e-3});
//   for (...) { stop.Observe(val_loss); if (stop.ShouldStop()) break; }
#ifndef TESSEL_CORE_EARLY_STOPPING_H_
#define TESSEL_CORE_EARLY_STOPPING_H_

#include <cstdint>
#include <optional>

namespace tessel {

struct EarlyStoppingPolicy {
  enum class Mode { kMin, kMax };
  int patience = 5;        // values without improvement before stopping (>= 1)
  double min_delta = 0.0;  // smallest change that counts as an improvement (>= 0)
  Mode mode = Mode::kMin;
};

class EarlyStopping {
 public:
  explicit EarlyStopping(EarlyStoppingPolicy policy) : policy_(policy) {}

  // Feeds one value; returns true if it improved on the best.
  bool Observe(double value);
  bool ShouldStop() const { return stop_; }
  std::optional<double> best() const { return best_; }
  int64_t observed() const { return observed_; }
  int64_t since_improvement() const { return since_improvement_; }
  const EarlyStoppingPolicy& policy() const { return policy_; }

 private:
  EarlyStoppingPolicy policy_;
  std::optional<double> best_;
  int64_t observed_ = 0;
  int64_t since_improvement_ = 0;
  bool stop_ = false;
};

}  // namespace tessel

#endif  // TESSEL_CORE_EARLY_STOPPING_H_
