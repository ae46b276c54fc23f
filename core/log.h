// Minimal leveled logging to stderr.
//
// Debian 12's Abseil (20220623) predates absl/log, so this is the smallest
// thing that serves: a timestamped line per call, prefixed by the process
// label set once at start-up (e.g. "server[1]"). Thread-safe: each line is
// written with a single write(2).
//
// Example:
//   tessel::SetLogLabel("worker[0]");
//   TESSEL_LOG(INFO) << "joined job " << job << " at epoch " << epoch;
#ifndef TESSEL_CORE_LOG_H_
#define TESSEL_CORE_LOG_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace tessel {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLabel(absl::string_view label);
void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

namespace internal {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

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

#endif  // TESSEL_CORE_LOG_H_
