// Prometheus metrics: counters, gauges and histograms in labelled families,
// and their text exposition format (version 0.0.4), which /metrics serves
// (rpc/metrics_server.h). No I/O here.
//
// A family has fixed label names; each distinct set of label values is one
// series, created on first use and kept (pointers stay valid) until Remove.
// Updating a series is a few atomic operations, so hot paths may hold the
// pointer and update it freely. Values that are cheaper to read when scraped
// than to track (a queue's depth, a job's step) are set by a collector that
// runs at the start of each exposition. Labels must stay bounded: job,
// shard, rank, method, reason; never a bucket or a step.
//
// TESSEL_METRICS=off in the environment turns recording off (every update
// returns at once; series stay at zero): benchmarks/metrics_overhead.py
// compares the two.
//
// Example:
//   auto& steps = tessel::metrics::Default().AddHistogram(
//       "tessel_worker_step_seconds", "time of one training step", {"job", "rank"},
//       tessel::metrics::ExponentialBuckets(1e-4, 2, 16));
//   tessel::metrics::Histogram* mine = steps.GetHistogram({"mlp", "0"});
//   mine->Observe(0.0123);
//   std::string text = tessel::metrics::Default().Expose();
#ifndef TESSEL_RUNTIME_METRICS_H_
#define TESSEL_RUNTIME_METRICS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace tessel::metrics {

// Whether updates are recorded (false under TESSEL_METRICS=off).
bool Enabled();
void SetEnabled(bool enabled);

// A value that only goes up (reset only when the process restarts).
class Counter {
 public:
  void Add(double v = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) {
    if (Enabled()) value_.store(v, std::memory_order_relaxed);
  }
  void Add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into cumulative buckets (upper bounds, ascending),
// with their sum and count.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Non-cumulative count of bucket i (i == bounds.size(): above the last bound).
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// `count` bounds: start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

enum class Type { kCounter, kGauge, kHistogram };

// One metric name and its series.
class Family {
 public:
  Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
         std::vector<double> bounds);
  ~Family();

  // The series with these label values (as many as label names; a mismatch
  // is a programming error and aborts), created on first use.
  // The getter must match the family's type (a mismatch aborts).
  Counter* GetCounter(const std::vector<std::string>& values);
  Gauge* GetGauge(const std::vector<std::string>& values);
  Histogram* GetHistogram(const std::vector<std::string>& values);
  // Whether the series exists (without creating it).
  bool Has(const std::vector<std::string>& values);
  // Drops every series for which `match(label values)` holds.
  void RemoveIf(const std::function<bool(const std::vector<std::string>&)>& match);
  // Drops a series (a job that ended); its pointer dangles afterwards.
  void Remove(const std::vector<std::string>& values);
  // Drops every series whose label `label` has value `value`.
  void RemoveMatching(const std::string& label, const std::string& value);

  const std::string& name() const { return name_; }
  Type type() const { return type_; }
  void Expose(std::string* out);

 private:
  struct Series;
  Series* Find(const std::vector<std::string>& values);

  const std::string name_;
  const std::string help_;
  const Type type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
};

// The families of one process and the collectors that refresh them.
class Registry {
 public:
  // Adding a name twice returns the existing family when type, labels (and
  // bounds) match, so independent components may share one; anything else is
  // a programming error and aborts.
  Family& AddCounter(const std::string& name, const std::string& help,
                     std::vector<std::string> labels);
  Family& AddGauge(const std::string& name, const std::string& help,
                   std::vector<std::string> labels);
  Family& AddHistogram(const std::string& name, const std::string& help,
                       std::vector<std::string> labels, std::vector<double> bounds);

  // Runs `collect` before each exposition until the returned handle dies.
  class CollectorHandle {
   public:
    CollectorHandle() = default;
    CollectorHandle(Registry* registry, int64_t id) : registry_(registry), id_(id) {}
    CollectorHandle(CollectorHandle&& other) noexcept;
    CollectorHandle& operator=(CollectorHandle&& other) noexcept;
    ~CollectorHandle();

   private:
    Registry* registry_ = nullptr;
    int64_t id_ = 0;
  };
  [[nodiscard]] CollectorHandle AddCollector(std::function<void()> collect);

  // Every family, sorted by name, in the text exposition format.
  std::string Expose();

 private:
  Family& Add(const std::string& name, const std::string& help, Type type,
              std::vector<std::string> labels, std::vector<double> bounds);
  void RemoveCollector(int64_t id);

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  // Collectors run under collect_mu_ (not mu_: they add series to families).
  absl::Mutex collect_mu_;
  std::map<int64_t, std::function<void()>> collectors_ ABSL_GUARDED_BY(collect_mu_);
  int64_t next_id_ ABSL_GUARDED_BY(collect_mu_) = 1;
};

// The process's registry, which /metrics serves.
Registry& Default();

// A label value or help text escaped for the exposition format.
std::string EscapeLabelValue(const std::string& value);

// Seconds since `start` on the steady clock, for observing durations.
double SecondsSince(std::chrono::steady_clock::time_point start);

}  // namespace tessel::metrics

#endif  // TESSEL_RUNTIME_METRICS_H_
