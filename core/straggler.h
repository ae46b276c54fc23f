// Straggler scoring: which rank sets the pace of a job, from when each
// rank's pushes reached a shard server over the last steps (the flight
// recorder's window, server/flight_recorder.h). Pure: no clock, no I/O.
//
// The rule (docs/observability.md, "Stragglers"):
//   - A step counts when it finished and the step before it is in the
//     window too (consecutive step numbers): it starts when the step before
//     ended (the servers' parameters were ready), so a rank's "time" in it
//     is its last push minus that start: its compute and push, whatever the
//     others did.
//   - A rank's lateness in a step is its last push minus the earliest last
//     push of any rank (0 for the rank that finished pushing first).
//   - Per rank, over the last `window` counted steps: the median time and
//     the median lateness. Its score is its median time over the median of
//     every rank's median time: 1.0 is as fast as the median rank, 3.0 three
//     times slower.
//   - A rank is named a straggler when its score reaches `enter_score` and
//     its median lateness reaches `min_lateness` (so microsecond jitter of a
//     fast job names nobody); it stays one until its score falls below
//     `leave_score` (hysteresis). A median over the window means one slow
//     step names nobody: more than half of the window must be slow.
// Fewer than `min_steps` counted steps, or one rank: no scores.
//
// Example:
//   std::vector<RankScore> s = ScoreRanks(window, StragglerRule{});
//   StragglerSet named;
//   for (const StragglerSet::Change& c : named.Update(s, StragglerRule{})) Log(c);
#ifndef TESSEL_CORE_STRAGGLER_H_
#define TESSEL_CORE_STRAGGLER_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/types/span.h"

namespace tessel {

// One step as one shard server saw it; times are microseconds of the system
// clock (the timeline's clock, runtime/timeline.h), -1 where not known.
struct StepArrivals {
  int64_t step = -1;    // the pushes' step (the version before the update)
  int64_t end_us = -1;  // the step's last bucket updated; -1: in progress
  // Per rank (per contributor under host aggregation): its first and last
  // push of the step (the header's arrival), -1 if it pushed nothing.
  std::vector<int64_t> first_push_us;
  std::vector<int64_t> last_push_us;
  // Per rank (slot as above): when its first PULL of the step's result (the
  // version after it) reached the shard, and when the shard sent that
  // rank the last PARAMS bucket of it; -1 if not asked or not served (yet).
  // The scoring rule does not read them; the stall dump and tesselctl do.
  std::vector<int64_t> pull_asked_us;
  std::vector<int64_t> pull_served_us;
};

// Every default of the rule, in one place.
struct StragglerRule {
  int window = 8;                   // counted steps scored, the newest
  int min_steps = 5;                // fewer counted steps: no scores
  double enter_score = 1.5;         // named at or above (and min_lateness)
  double leave_score = 1.25;        // no longer named below
  int64_t min_lateness_us = 20000;  // 20 ms
};

struct RankScore {
  int rank = 0;
  double score = 1.0;     // median time / median rank's; 1.0 = the median's pace
  double lateness_s = 0;  // median lateness over the window
  double time_s = 0;      // median time (last push minus the step's start)
  int steps = 0;          // counted steps it was scored over
};

// Scores per rank (rank order), empty when the window holds fewer than
// rule.min_steps counted steps or the job has fewer than two ranks. `window`
// is oldest first, as FlightRecorder::Window returns it.
std::vector<RankScore> ScoreRanks(absl::Span<const StepArrivals> window, const StragglerRule& rule);

// The ranks named now, with hysteresis; one per job and server.
class StragglerSet {
 public:
  struct Change {
    bool started = false;  // true: named now; false: no longer
    RankScore score;
  };
  // Applies the rule to new scores; returns who started and who ended (in
  // rank order). Empty `scores` (too few steps) changes nothing.
  std::vector<Change> Update(absl::Span<const RankScore> scores, const StragglerRule& rule);
  // Named now: rank -> its last score.
  const std::map<int, RankScore>& named() const { return named_; }
  void Clear() { named_.clear(); }

 private:
  std::map<int, RankScore> named_;
};

}  // namespace tessel

#endif  // TESSEL_CORE_STRAGGLER_H_
