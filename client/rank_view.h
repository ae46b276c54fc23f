// The per-rank view of a job that `tesselctl top` prints: each rank's
// registry record (host, pid, pod, last heartbeat and step phases) beside
// what the job's shard servers saw of it (their flight recorders, scores and
// bytes), combined over shards. Pure: no clock (the caller passes now), no
// I/O.
//
// Combining rules (docs/operations.md, "Watching a job: tesselctl top"):
//   - lateness and score: the highest over the shards (a rank late at any
//     shard holds the step back); lateness is the servers' median over their
//     straggler window (core/straggler.h) once they have one, before that the
//     newest finished step's (last push minus the first rank's last push);
//   - straggler: the score and lateness reach the servers' rule
//     (StragglerRule's enter_score and min_lateness_us);
//   - steps/s: the rank's finished steps over the time between their last
//     pushes, on the shard that recorded the most of them;
//   - bytes: summed over the shards;
//   - step: the newest step the rank pushed to any shard (the servers'
//     view, current to the frame); reported_step: the worker's own, from its
//     heartbeats (up to a third of its lease behind);
//   - phase: where the worker's last reported step spent most of its time:
//     computing (the caller's code: forward, backward, data), pushing,
//     waiting (for the other ranks and the servers' update) or pulling.
// Under host aggregation the servers record host groups, not ranks: the
// server columns are then left unknown (null, "-").
//
// Example:
//   TopSnapshot top = CombineRanks("mlp", stats, view, absl::ToUnixMicros(absl::Now()));
//   nlohmann::json j = TopJson(top);
#ifndef TESSEL_CLIENT_RANK_VIEW_H_
#define TESSEL_CLIENT_RANK_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "proto/registry.pb.h"
#include "proto/shard.pb.h"

namespace tessel::ctl {

// The phase a worker's last step spent most of its time in ("" if it has
// reported none).
std::string DominantPhase(const v1::StepPhases& p);

// Data-parallel rank -> registry rank (ShardStats.worker_ids; identity
// when empty).
int RegistryRankOf(const v1::ShardStats& st, int rank);

// The job group's worker with registry rank `registry_rank` (nullptr if
// none).
const v1::Member* FindWorker(const v1::View& view, int registry_rank);

struct RankRow {
  int rank = 0;
  int registry_rank = 0;
  bool member = false;  // the registry lists it now
  std::string host, pod;
  int64_t pid = 0;
  int64_t step = -1;           // newest step it pushed (servers); -1: none seen
  int64_t reported_step = -1;  // the worker's step (heartbeats); -1: not reported
  std::string phase;           // DominantPhase of its last step; "" unknown
  v1::StepPhases phases;
  int64_t last_heartbeat_unix_ms = 0;  // 0: unknown
  std::optional<double> steps_per_s;
  std::optional<double> lateness_s;
  std::optional<double> score;
  bool straggler = false;
  std::optional<int64_t> pushed_bytes, pulled_bytes;
};

struct TopSnapshot {
  std::string job;
  int64_t now_us = 0;
  int64_t step = 0;  // the servers' version (lowest over shards holding elements)
  int world = 0;
  int shards_reachable = 0;
  std::vector<RankRow> ranks;
};

// `stats`: the reachable shards' GetStats of the job; `view`: the job's
// registry group (GetView, with Member.liveness).
TopSnapshot CombineRanks(const std::string& job, const std::vector<v1::ShardStats>& stats,
                         const v1::View& view, int64_t now_us);

nlohmann::json TopJson(const TopSnapshot& top);
// The table's header and rows (RANK, HOST, PID, POD, STEP, STEPS/S,
// LATENESS, SCORE, PHASE, PUSHED, PULLED, HEARTBEAT).
std::vector<std::string> TopHeader();
std::vector<std::vector<std::string>> TopTable(const TopSnapshot& top);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_RANK_VIEW_H_
