#include "runtime/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::metrics {
namespace {

void AtomicAdd(std::atomic<double>& a, double v) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

// Prometheus's float text: integers exactly (below 2^53), others in the
// shortest form that reads back the same; +Inf/-Inf/NaN.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  char buffer[32];
  for (int digits : {9, 15, 17}) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  return buffer;
}

// The exposition format's escapes: backslash and newline everywhere, and
// the double quote inside label values.
std::string Escape(const std::string& text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "metrics: %s\n", what.c_str());
  std::abort();
}

const char* TypeName(Type t) {
  switch (t) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

namespace {
std::atomic<bool>& EnabledFlag() {
  static std::atomic<bool> enabled{[] {
    const char* e = std::getenv("TESSEL_METRICS");
    return e == nullptr || std::string(e) != "off";
  }()};
  return enabled;
}
}  // namespace

bool Enabled() { return EnabledFlag().load(std::memory_order_relaxed); }

void SetEnabled(bool enabled) { EnabledFlag().store(enabled); }

void Counter::Add(double v) {
  if (Enabled()) AtomicAdd(value_, v);
}

void Gauge::Add(double v) {
  if (Enabled()) AtomicAdd(value_, v);
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds->size(); ++i) buckets_[i].store(0);
}

void Histogram::Observe(double v) {
  if (!Enabled()) return;
  const size_t i = std::lower_bound(bounds_->begin(), bounds_->end(), v) - bounds_->begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

struct Family::Series {
  explicit Series(const std::vector<double>* bounds) : histogram(bounds) {}
  class Counter counter;
  class Gauge gauge;
  class Histogram histogram;
};

Family::Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
               std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

Family::~Family() = default;

Family::Series* Family::Find(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", values.size(), " label values for labels (",
                     absl::StrJoin(label_names_, ", "), ")"));
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Series>& s = series_[values];
  if (s == nullptr) s = std::make_unique<Series>(&bounds_);
  return s.get();
}

Counter* Family::GetCounter(const std::vector<std::string>& values) {
  if (type_ != Type::kCounter) Die(name_ + " is not a counter");
  return &Find(values)->counter;
}

Gauge* Family::GetGauge(const std::vector<std::string>& values) {
  if (type_ != Type::kGauge) Die(name_ + " is not a gauge");
  return &Find(values)->gauge;
}

Histogram* Family::GetHistogram(const std::vector<std::string>& values) {
  if (type_ != Type::kHistogram) Die(name_ + " is not a histogram");
  return &Find(values)->histogram;
}

bool Family::Has(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  return series_.count(values) > 0;
}

void Family::RemoveIf(const std::function<bool(const std::vector<std::string>&)>& match) {
  absl::MutexLock lock(&mu_);
  for (auto s = series_.begin(); s != series_.end();) {
    s = match(s->first) ? series_.erase(s) : std::next(s);
  }
}

void Family::Remove(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  series_.erase(values);
}

void Family::RemoveMatching(const std::string& label, const std::string& value) {
  const auto it = std::find(label_names_.begin(), label_names_.end(), label);
  if (it == label_names_.end()) return;
  const size_t k = it - label_names_.begin();
  absl::MutexLock lock(&mu_);
  for (auto s = series_.begin(); s != series_.end();) {
    s = s->first[k] == value ? series_.erase(s) : std::next(s);
  }
}

void Family::Expose(std::string* out) {
  absl::MutexLock lock(&mu_);
  if (series_.empty()) return;  // promtool: a family needs a sample
  absl::StrAppend(out, "# HELP ", name_, " ", Escape(help_, /*quote=*/false), "\n# TYPE ", name_,
                  " ", TypeName(type_), "\n");
  auto labels = [&](const std::vector<std::string>& values, const std::string& extra) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < values.size(); ++i) {
      parts.push_back(absl::StrCat(label_names_[i], "=\"", EscapeLabelValue(values[i]), "\""));
    }
    if (!extra.empty()) parts.push_back(extra);
    return parts.empty() ? std::string() : absl::StrCat("{", absl::StrJoin(parts, ","), "}");
  };
  for (const auto& [values, s] : series_) {
    switch (type_) {
      case Type::kCounter:
        absl::StrAppend(out, name_, labels(values, ""), " ", FormatValue(s->counter.value()), "\n");
        break;
      case Type::kGauge:
        absl::StrAppend(out, name_, labels(values, ""), " ", FormatValue(s->gauge.value()), "\n");
        break;
      case Type::kHistogram: {
        // Read the buckets first, then the count as their total, so a
        // concurrent Observe never shows a count below the +Inf bucket.
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= bounds_.size(); ++i) {
          cumulative += s->histogram.bucket(i);
          const std::string le = i < bounds_.size() ? FormatValue(bounds_[i]) : "+Inf";
          absl::StrAppend(out, name_, "_bucket", labels(values, absl::StrCat("le=\"", le, "\"")),
                          " ", cumulative, "\n");
        }
        absl::StrAppend(out, name_, "_sum", labels(values, ""), " ",
                        FormatValue(s->histogram.sum()), "\n", name_, "_count", labels(values, ""),
                        " ", cumulative, "\n");
        break;
      }
    }
  }
}

Family& Registry::Add(const std::string& name, const std::string& help, Type type,
                      std::vector<std::string> labels, std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Family>& f = families_[name];
  if (f == nullptr) {
    f = std::make_unique<Family>(name, help, type, std::move(labels), std::move(bounds));
  } else if (f->type() != type) {
    Die(absl::StrCat(name, " added again with another type"));
  }
  return *f;
}

Family& Registry::AddCounter(const std::string& name, const std::string& help,
                             std::vector<std::string> labels) {
  return Add(name, help, Type::kCounter, std::move(labels), {});
}

Family& Registry::AddGauge(const std::string& name, const std::string& help,
                           std::vector<std::string> labels) {
  return Add(name, help, Type::kGauge, std::move(labels), {});
}

Family& Registry::AddHistogram(const std::string& name, const std::string& help,
                               std::vector<std::string> labels, std::vector<double> bounds) {
  if (!std::is_sorted(bounds.begin(), bounds.end()) || bounds.empty()) {
    Die(name + ": histogram bounds must be ascending and not empty");
  }
  return Add(name, help, Type::kHistogram, std::move(labels), std::move(bounds));
}

Registry::CollectorHandle::CollectorHandle(CollectorHandle&& other) noexcept
    : registry_(other.registry_), id_(other.id_) {
  other.registry_ = nullptr;
}

Registry::CollectorHandle& Registry::CollectorHandle::operator=(CollectorHandle&& other) noexcept {
  if (this != &other) {
    if (registry_ != nullptr) registry_->RemoveCollector(id_);
    registry_ = other.registry_;
    id_ = other.id_;
    other.registry_ = nullptr;
  }
  return *this;
}

Registry::CollectorHandle::~CollectorHandle() {
  if (registry_ != nullptr) registry_->RemoveCollector(id_);
}

Registry::CollectorHandle Registry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&collect_mu_);
  const int64_t id = next_id_++;
  collectors_[id] = std::move(collect);
  return CollectorHandle(this, id);
}

void Registry::RemoveCollector(int64_t id) {
  // Waits for a running exposition: the collector's owner may die after this.
  absl::MutexLock lock(&collect_mu_);
  collectors_.erase(id);
}

std::string Registry::Expose() {
  {
    absl::MutexLock lock(&collect_mu_);
    for (auto& [id, collect] : collectors_) collect();
  }
  std::vector<Family*> families;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, f] : families_) families.push_back(f.get());
  }
  std::string out;
  for (Family* f : families) f->Expose(&out);
  return out;
}

Registry& Default() {
  static Registry* registry = new Registry();
  return *registry;
}

std::string EscapeLabelValue(const std::string& value) { return Escape(value, /*quote=*/true); }

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tessel::metrics
