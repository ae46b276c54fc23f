// A per-process timeline of training steps in the Chrome trace event format
// (JSON array form), which chrome://tracing and Perfetto (ui.perfetto.dev)
// open. Workers and shard servers write one file each (--timeline=PATH);
// tools/tessel-timeline merges the files of one job onto one clock.
//
// One event per line, written as it happens ("[", then "{...},"): a file cut
// short by a crash still loads. Times are microseconds of the system clock
// (CLOCK_REALTIME), so the files of one host share a clock; the merge tool
// aligns other hosts' from the causal order of pushes and parameters.
//
// Only steps in [first_step, first_step + steps) are recorded (steps = 0:
// all), so a long run does not fill the disk.
//
// Example:
//   auto t = tessel::Timeline::Open("/tmp/w0.json", "worker[0]", {.steps = 100});
//   (*t)->Instant("push", "exchange", tessel::Timeline::NowUs(),
//                 {.job = "mlp", .step = 4, .shard = 0, .bucket = 2});
#ifndef TESSEL_RUNTIME_TIMELINE_H_
#define TESSEL_RUNTIME_TIMELINE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessel {

struct TimelineOptions {
  int64_t first_step = 1;
  int64_t steps = 100;  // 0: every step
};

// What an event is about: its "args" in the trace.
struct TimelineArgs {
  std::string job = "";
  int64_t step = -1;
  std::optional<int> rank = std::nullopt;
  std::optional<int> shard = std::nullopt;
  std::optional<int> bucket = std::nullopt;
};

class Timeline {
 public:
  // Creates (truncates) `path`; "{rank}" or "{shard}" in it are the caller's
  // to replace. Unavailable naming the path when it cannot be written.
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path,
                                                        const std::string& process,
                                                        TimelineOptions options = {});
  ~Timeline();  // flushes and closes the array

  // Whether events of `step` are recorded.
  bool Records(int64_t step) const {
    return step >= options_.first_step &&
           (options_.steps == 0 || step < options_.first_step + options_.steps);
  }
  // A span ("X") on `thread` from start_us to end_us, if Records(args.step).
  void Span(absl::string_view name, absl::string_view thread, int64_t start_us, int64_t end_us,
            const TimelineArgs& args);
  // A point ("i", thread scope), if Records(args.step).
  void Instant(absl::string_view name, absl::string_view thread, int64_t ts_us,
               const TimelineArgs& args);
  void Flush();

  const std::string& path() const { return path_; }
  static int64_t NowUs();

 private:
  Timeline(std::string path, std::FILE* f, std::string process, TimelineOptions options);
  int ThreadId(absl::string_view thread) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const std::string process_;
  const TimelineOptions options_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> threads_ ABSL_GUARDED_BY(mu_);
  int64_t unflushed_ ABSL_GUARDED_BY(mu_) = 0;
};

// `pattern` with "{rank}" and "{shard}" replaced (by -1 if not given).
std::string TimelinePath(const std::string& pattern, int rank, int shard);

}  // namespace tessel

#endif  // TESSEL_RUNTIME_TIMELINE_H_
