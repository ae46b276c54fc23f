// --timeline, --timeline_first_step and --timeline_steps, defined once for
// the binaries that write a step timeline (tessel-server, tessel-train and
// the other Abseil-flags workers). Their defaults are TimelineOptions'
// (runtime/timeline.h).
//
// Example:
//   absl::StatusOr<TimelineFlags> t = TimelineFromFlags();
//   if (!t.ok()) return Fail(t.status());
//   options.timeline = t->path;
//   options.timeline_window = t->window;
#ifndef TESSEL_RUNTIME_TIMELINE_FLAGS_H_
#define TESSEL_RUNTIME_TIMELINE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "runtime/timeline.h"

ABSL_DECLARE_FLAG(std::string, timeline);
ABSL_DECLARE_FLAG(int64_t, timeline_first_step);
ABSL_DECLARE_FLAG(int64_t, timeline_steps);

namespace tessel {

struct TimelineFlags {
  std::string path;  // "" = off
  TimelineOptions window;
};

// The flags; InvalidArgument naming the flag for a negative step or count.
absl::StatusOr<TimelineFlags> TimelineFromFlags();

}  // namespace tessel

#endif  // TESSEL_RUNTIME_TIMELINE_FLAGS_H_
