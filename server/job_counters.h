// JobCounters: what a shard job has counted since the job (or the first job
// of its name on this server, across recoveries) began: frames refused,
// frames from a stale membership epoch, steps applied, bytes pushed and
// pulled, time spent reducing and updating, pushes summed early (prefix
// order), recoveries. They feed ShardStats and the server's metrics.
//
// Contract: plain counts, all >= 0. Add(other) sums every count: a job that
// replaces another (recovery) carries on the old job's counts, and the
// caller counts the recovery itself.
//
// Threads: none and no lock: the owner (ShardJob) guards its copy.
//
// Example:
//   JobCounters counters;
//   ++counters.rejected;
//   replacement.Add(previous);  // then ++replacement.recoveries
#ifndef TESSEL_SERVER_JOB_COUNTERS_H_
#define TESSEL_SERVER_JOB_COUNTERS_H_

#include <cstdint>

namespace tessel {

struct JobCounters {
  int64_t rejected = 0;     // frames refused (any reason)
  int64_t stale_epoch = 0;  // frames from another membership epoch
  int64_t applied_steps = 0;
  int64_t pushed_bytes = 0;
  int64_t pulled_bytes = 0;
  int64_t update_us = 0;      // reducing and updating buckets, folds included
  int64_t folded_pushes = 0;  // pushes summed before their bucket was complete
  int64_t recoveries = 0;

  void Add(const JobCounters& o) {
    rejected += o.rejected;
    stale_epoch += o.stale_epoch;
    applied_steps += o.applied_steps;
    pushed_bytes += o.pushed_bytes;
    pulled_bytes += o.pulled_bytes;
    update_us += o.update_us;
    folded_pushes += o.folded_pushes;
    recoveries += o.recoveries;
  }
};

}  // namespace tessel

#endif  // TESSEL_SERVER_JOB_COUNTERS_H_
