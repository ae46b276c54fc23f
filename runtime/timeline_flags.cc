#include "runtime/timeline_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, timeline, "",
          "write a Chrome-trace/Perfetto timeline of each step per bucket to this file (workers: "
          "push sent, parameters received; shard servers: pushes received, the reduction and "
          "update, parameters sent); \"{rank}\" or \"{shard}\" in it becomes the worker's rank "
          "or the server's shard; merge a job's files with tools/tessel-timeline "
          "(docs/observability.md); empty: off");
ABSL_FLAG(int64_t, timeline_first_step, tessel::TimelineOptions{}.first_step,
          "first step --timeline records");
ABSL_FLAG(int64_t, timeline_steps, tessel::TimelineOptions{}.steps,
          "steps --timeline records (0: every step)");

namespace tessel {

absl::StatusOr<TimelineFlags> TimelineFromFlags() {
  TimelineFlags t;
  t.path = absl::GetFlag(FLAGS_timeline);
  t.window.first_step = absl::GetFlag(FLAGS_timeline_first_step);
  t.window.steps = absl::GetFlag(FLAGS_timeline_steps);
  if (t.window.first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeline_first_step must be >= 0; got ", t.window.first_step));
  }
  if (t.window.steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeline_steps must be >= 0 (0: every step); got ", t.window.steps));
  }
  return t;
}

}  // namespace tessel
