// Leveled logging to stderr, one line per call, for people and for log
// pipelines.
//
// Debian 12's Abseil (20220623) predates absl/log, so this is the smallest
// thing that serves. Every line carries an RFC 3339 UTC timestamp with
// milliseconds and the process label set once at start-up (e.g. "server[1]").
// Two formats (SetLogFormat; the binaries' --log_format flag, runtime/cli.h):
//
//   text  I 2026-11-25T01:56:03.123Z server[1] shard_job.cc:88] job mlp: step 40 done
//   json  {"time":"2026-11-25T01:56:03.123Z","level":"info","process":"server[1]",
//          "source":"shard_job.cc:88","job":"mlp","shard":1,"step":40,
//          "msg":"job mlp: step 40 done"}
//
// The json fields job, rank, shard and step come from the process's context
// (SetLogContext, SetLogStep) and, for one thread, from a ScopedLogContext
// (a shard server's RPC handler, which serves many jobs); absent ones are
// left out. Thread-safe: each line is written with a single write(2).
//
// Example:
//   tessel::SetLogLabel("worker[0]");
//   tessel::SetLogContext({.job = "mlp", .rank = 0});
//   TESSEL_LOG(INFO) << "joined job " << job << " at epoch " << epoch;
#ifndef TESSEL_RUNTIME_LOG_H_
#define TESSEL_RUNTIME_LOG_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tessel {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

void SetLogLabel(absl::string_view label);
void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();

// "debug", "info", "warning", "error".
absl::string_view LogLevelName(LogLevel level);
// "debug", "info", "warning" (or "warn"), "error"; InvalidArgument otherwise.
absl::Status ParseLogLevel(absl::string_view text, LogLevel* level);
// "text" or "json"; InvalidArgument otherwise.
absl::Status ParseLogFormat(absl::string_view text, LogFormat* format);

// The fields json lines carry beyond time, level, process and source.
struct LogContext {
  std::string job = "";                        // empty: absent
  std::optional<int> rank = std::nullopt;      // a worker's rank
  std::optional<int> shard = std::nullopt;     // a shard server's index
  std::optional<int64_t> step = std::nullopt;  // the training step in progress
};

// The process's context (replaces it; SetLogStep changes only the step,
// which is >= 0).
void SetLogContext(const LogContext& context);
void SetLogStep(int64_t step);

// Overrides the process's job and step on this thread while it lives (fields
// left empty keep the process's). Nests.
class ScopedLogContext {
 public:
  explicit ScopedLogContext(LogContext context);
  ~ScopedLogContext();
  ScopedLogContext(const ScopedLogContext&) = delete;
  ScopedLogContext& operator=(const ScopedLogContext&) = delete;

  const LogContext& context() const { return context_; }
  const ScopedLogContext* outer() const { return outer_; }

 private:
  LogContext context_;
  const ScopedLogContext* outer_;
};

// The RFC 3339 UTC form of `t` with milliseconds: 2026-11-25T01:56:03.123Z.
std::string FormatRfc3339Utc(absl::Time t);

namespace internal {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  absl::Time time_;
  std::ostringstream stream_;
};

// The line LogLine writes, for tests: `message` as logged at `time`.
std::string FormatLogLine(LogLevel level, absl::Time time, absl::string_view file, int line,
                          absl::string_view message);

// True at most once per `period` for the call site that owns `last_ns`
// (the time it last said true; 0: never): rate-limited lines.
bool ShouldLogNow(std::atomic<int64_t>* last_ns, absl::Duration period);

// Lower precedence than <<: turns a streamed line into void for `?:`.
struct Voidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace tessel

#define TESSEL_LOG_LEVEL_DEBUG ::tessel::LogLevel::kDebug
#define TESSEL_LOG_LEVEL_INFO ::tessel::LogLevel::kInfo
#define TESSEL_LOG_LEVEL_WARNING ::tessel::LogLevel::kWarning
#define TESSEL_LOG_LEVEL_ERROR ::tessel::LogLevel::kError

// An expression (not an if), so it nests safely under an unbraced if/else.
#define TESSEL_LOG(level)                         \
  !::tessel::LogEnabled(TESSEL_LOG_LEVEL_##level) \
      ? (void)0                                   \
      : ::tessel::internal::Voidify() &           \
            ::tessel::internal::LogLine(TESSEL_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

// As TESSEL_LOG, but at most one line per `seconds` from this call site
// (the lines in between are dropped): for what may repeat at message rate.
#define TESSEL_LOG_EVERY_N_SEC(level, seconds)               \
  !(::tessel::LogEnabled(TESSEL_LOG_LEVEL_##level) &&        \
    ::tessel::internal::ShouldLogNow(                        \
        [] {                                                 \
          static std::atomic<int64_t> tessel_log_last_ns{0}; \
          return &tessel_log_last_ns;                        \
        }(),                                                 \
        absl::Seconds(seconds)))                             \
      ? (void)0                                              \
      : ::tessel::internal::Voidify() &                      \
            ::tessel::internal::LogLine(TESSEL_LOG_LEVEL_##level, __FILE__, __LINE__).stream()

#endif  // TESSEL_RUNTIME_LOG_H_
