// The flight recorder's window (server/flight_recorder.h) as a timeline
// (runtime/timeline.h: the Chrome trace format that Perfetto and
// chrome://tracing open, and tools/tessel-timeline merges), written when a
// step stalls so the run-up to the stall can be seen: one track per rank
// with a span per step from the step's start (the previous step's end) to
// the rank's first push ("pull+compute") and from its first to its last push
// ("push"), a track "steps" with each step's span, and on the step in
// progress an instant "waiting" on each rank that has not pushed.
//
// Example:
//   auto path = WriteFlightTimeline("/tmp", "mlp", /*shard=*/0, stats.flight, absl::Now());
//   if (path.ok()) TESSEL_LOG(WARNING) << "written to " << *path;
#ifndef TESSEL_SERVER_FLIGHT_DUMP_H_
#define TESSEL_SERVER_FLIGHT_DUMP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/straggler.h"

namespace tessel {

// Writes `window` (oldest first) to DIR/tessel-flight-JOB-shardS-UNIXMS.json
// and returns the path; Unavailable naming it when it cannot be written.
absl::StatusOr<std::string> WriteFlightTimeline(const std::string& dir, const std::string& job,
                                                int shard, const std::vector<StepArrivals>& window,
                                                absl::Time now);

}  // namespace tessel

#endif  // TESSEL_SERVER_FLIGHT_DUMP_H_
