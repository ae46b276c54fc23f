#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessel {
namespace {
std::mutex label_mu;
std::string& Label() {
  static std::string* label = new std::string("tessel");
  return *label;
}
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void SetLogLabel(absl::string_view label) {
  std::lock_guard<std::mutex> lock(label_mu);
  Label() = std::string(label);
}

void SetMinLogLevel(LogLevel level) { min_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= min_level.load(); }

namespace internal {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  const char* base = std::strrchr(file, '/');
  std::string label;
  {
    std::lock_guard<std::mutex> lock(label_mu);
    label = Label();
  }
  stream_ << kLetters[static_cast<int>(level)]
          << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()) << " " << label
          << " " << (base ? base + 1 : file) << ":" << line << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string s = stream_.str();
  (void)level_;
  ssize_t unused = ::write(STDERR_FILENO, s.data(), s.size());
  (void)unused;
}

}  // namespace internal
}  // namespace tessel
