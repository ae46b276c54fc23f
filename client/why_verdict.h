// `tesselctl why`'s verdict: whether a job progresses and, when it does not,
// what its step waits for, from the shard servers' own account of the step
// in progress (ShardStats.waiting: who has not pushed which buckets, the
// stall report they log) and the registry's record of each rank (lease,
// last heartbeat, last step's phases, host, pid, pod). Pure: the caller
// passes the time and how to tell whether a process is alive.
//
// The rule (docs/operations.md, "When a job does not progress"):
//   - a shard has a step in progress for `stalled_after` or longer: stalled.
//     The culprits are the ranks that owe it buckets (not pushed, or still
//     being received), with what each owes on each shard; none (every push
//     arrived) means the servers' own update or serve is stuck;
//   - no step in progress anywhere, but the last one ended `stalled_after` or
//     longer ago: stalled too, every rank a culprit (none has pushed);
//   - otherwise progressing (a job that has not stepped yet: not started).
// Each culprit's activity now is inferred: pushed part of the step:
// "pushing"; pushed none of it: by the servers' flight recorders, what it
// did with the step before's result: every shard served its pull:
// "computing" (in the caller's code: forward, backward, data); a shard has
// not served it yet: "pulling"; a shard has no pull from it: "behind" (it
// never finished the step before). Where the servers no longer hold the step
// before, its heartbeats say: its last reported step is this one:
// "computing", else "behind".
//
// Example:
//   WhyReport w = Diagnose(shards, view, absl::ToUnixMicros(absl::Now()), 10.0, IsAlive);
//   return WhyExitCode(w.verdict);
#ifndef TESSEL_CLIENT_WHY_VERDICT_H_
#define TESSEL_CLIENT_WHY_VERDICT_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "proto/registry.pb.h"
#include "proto/shard.pb.h"

namespace tessel::ctl {

enum class Verdict {
  kProgressing,       // exit 0
  kNotStarted,        // exit 0: no step ended and none in progress
  kStalled,           // exit 7: the ranks it waits for are named
  kStalledOnServers,  // exit 8: every push arrived; the servers did not finish
};
const char* VerdictName(Verdict v);
int WhyExitCode(Verdict v);

// Whether process `pid` on `host` is alive: "yes", "yes (stopped)", "no",
// "unknown, host X" (another host).
using AliveCheck = std::function<std::string(const std::string& host, int64_t pid)>;

struct ShardOwed {
  int shard = 0;
  int num_buckets = 0;
  std::vector<int> not_pushed;
  std::vector<int> receiving;
};

struct Culprit {
  int rank = 0;  // data-parallel rank (host_group: the group)
  bool host_group = false;
  int registry_rank = 0;
  bool member = false;  // the registry lists it
  std::string host, pod;
  int64_t pid = 0;
  std::vector<ShardOwed> owes;         // empty: it owes every bucket (nothing in progress)
  int64_t last_heartbeat_unix_ms = 0;  // 0: unknown
  int64_t lease_expires_unix_ms = 0;
  int64_t reported_step = -1;  // its last step's phases' step; -1: none
  std::string last_phase;      // DominantPhase of that step ("" none)
  std::string doing;           // computing, pushing, behind
  std::string alive;
};

struct WhyReport {
  std::string job;
  Verdict verdict = Verdict::kProgressing;
  int64_t now_us = 0;
  int64_t step = -1;      // the step in progress (or the next, when idle)
  int64_t since_us = -1;  // its first push (idle: the last step's end)
  std::vector<Culprit> culprits;
  std::vector<std::string> notes;  // the servers' side, per shard
};

// `shards`: the reachable shards' GetStats of the job.
WhyReport Diagnose(const std::string& job, const std::vector<v1::ShardStats>& shards,
                   const v1::View& view, int64_t now_us, double stalled_after_s,
                   const AliveCheck& alive);

nlohmann::json WhyJson(const WhyReport& w);
// The human account, one culprit per paragraph.
void WhyText(const WhyReport& w, std::ostream& out);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_WHY_VERDICT_H_
