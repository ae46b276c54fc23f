#include "runtime/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

struct ProcessContext {
  std::mutex mu;
  std::string label = "tessel";
  LogContext context;
};

ProcessContext& Process() {
  static ProcessContext* process = new ProcessContext();
  return *process;
}

std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> log_format{static_cast<int>(LogFormat::kText)};
std::atomic<int64_t> process_step{-1};  // -1: none
thread_local const ScopedLogContext* scoped_context = nullptr;

constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
constexpr const char* kNames[] = {"debug", "info", "warning", "error"};

}  // namespace

void SetLogLabel(absl::string_view label) {
  ProcessContext& p = Process();
  std::lock_guard<std::mutex> lock(p.mu);
  p.label = std::string(label);
}

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= min_level.load(); }

void SetLogFormat(LogFormat format) { log_format.store(static_cast<int>(format)); }

LogFormat GetLogFormat() { return static_cast<LogFormat>(log_format.load()); }

absl::string_view LogLevelName(LogLevel level) { return kNames[static_cast<int>(level)]; }

absl::Status ParseLogLevel(absl::string_view text, LogLevel* level) {
  const std::string lower = absl::AsciiStrToLower(text);
  for (int i = 0; i < 4; ++i) {
    if (lower == kNames[i]) {
      *level = static_cast<LogLevel>(i);
      return absl::OkStatus();
    }
  }
  if (lower == "warn") {
    *level = LogLevel::kWarning;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level \"", text, "\" is not one of debug, info, warning, error"));
}

absl::Status ParseLogFormat(absl::string_view text, LogFormat* format) {
  if (text == "text") {
    *format = LogFormat::kText;
  } else if (text == "json") {
    *format = LogFormat::kJson;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("log format \"", text, "\" is not one of text, json"));
  }
  return absl::OkStatus();
}

void SetLogContext(const LogContext& context) {
  ProcessContext& p = Process();
  std::lock_guard<std::mutex> lock(p.mu);
  p.context = context;
  p.context.step.reset();  // kept in process_step, which SetLogStep changes without the lock
  process_step.store(context.step.value_or(-1));
}

void SetLogStep(int64_t step) { process_step.store(step); }

ScopedLogContext::ScopedLogContext(LogContext context)
    : context_(std::move(context)), outer_(scoped_context) {
  scoped_context = this;
}

ScopedLogContext::~ScopedLogContext() { scoped_context = outer_; }

std::string FormatRfc3339Utc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

namespace internal {

std::string FormatLogLine(LogLevel level, absl::Time time, absl::string_view file, int line,
                          absl::string_view message) {
  const size_t slash = file.rfind('/');
  const absl::string_view base = slash == absl::string_view::npos ? file : file.substr(slash + 1);
  std::string label;
  LogContext context;
  {
    ProcessContext& p = Process();
    std::lock_guard<std::mutex> lock(p.mu);
    label = p.label;
    context = p.context;
  }
  if (const int64_t step = process_step.load(); step >= 0) context.step = step;
  // Scopes override the process's fields; the innermost scope wins, field by field.
  bool job = false, rank = false, shard = false, step = false;
  for (const ScopedLogContext* s = scoped_context; s != nullptr; s = s->outer()) {
    const LogContext& c = s->context();
    if (!job && !c.job.empty()) job = true, context.job = c.job;
    if (!rank && c.rank) rank = true, context.rank = c.rank;
    if (!shard && c.shard) shard = true, context.shard = c.shard;
    if (!step && c.step) step = true, context.step = c.step;
  }
  const int l = static_cast<int>(level);
  if (GetLogFormat() == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["time"] = FormatRfc3339Utc(time);
    j["level"] = kNames[l];
    j["process"] = label;
    j["source"] = absl::StrCat(base, ":", line);
    if (!context.job.empty()) j["job"] = context.job;
    if (context.rank) j["rank"] = *context.rank;
    if (context.shard) j["shard"] = *context.shard;
    if (context.step) j["step"] = *context.step;
    j["msg"] = std::string(message);
    // Invalid UTF-8 in a message is replaced rather than thrown on.
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return absl::StrCat(std::string(1, kLetters[l]), " ", FormatRfc3339Utc(time), " ", label, " ",
                      base, ":", line, "] ", message, "\n");
}

bool ShouldLogNow(std::atomic<int64_t>* last_ns, absl::Duration period) {
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = last_ns->load();
  if (last != 0 && now - last < absl::ToInt64Nanoseconds(period)) return false;
  return last_ns->compare_exchange_strong(last, now);
}

LogLine::LogLine(LogLevel level, const char* file, int line)
    : level_(level), file_(file), line_(line), time_(absl::Now()) {}

LogLine::~LogLine() {
  const std::string s = FormatLogLine(level_, time_, file_, line_, stream_.str());
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace internal
}  // namespace tessel
