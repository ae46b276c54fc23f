// A lost worker without rollback (zero1, zero2, fsdp): the replacement rejoins the
// step in flight (docs/operations.md, "Recovery").
//
// When a worker dies the shards keep everything: the step it applied last
// (v) on every shard, and the step in flight (v + 1), with every push that
// landed. The survivors wait in that step (Membership pauses in place). The
// replacement reads each shard's stats, pulls version v (a shard serves it
// even where buckets of v + 1 were updated already: server/served_versions;
// fsdp gathers its units at v as the forward asks), and marks as pushed the
// buckets of v + 1 its rank had delivered before it died, so its first step recomputes the gradient
// of v + 1 from the same parameters and data and pushes only the rest: the shards end step v + 1
// with the bits they would have had, nothing is replayed.
//
// The shards need not be at one version: the dead rank may have finished its
// pushes to one shard (which went on to v + 1) and not to another. They
// differ by at most one (no step passes without every rank); the replacement
// takes the lower one.
//
// Both sides decide alone whether the job rejoins in place (InPlaceEligible:
// the job's configuration), so they agree; where they do not (a survivor that
// used worker collectives, a shard server lost as well), the rejoin or the
// waiting step fails recoverably and everyone rolls back to the latest
// checkpoint as before.
//
// Threads: the driving thread.
#ifndef TESSEL_WORKER_INTERNAL_REJOIN_H_
#define TESSEL_WORKER_INTERNAL_REJOIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/shard.pb.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

// Whether a lost worker of this job is replaced without rollback: recovery
// and rejoin_in_place on, zero1, zero2 or fsdp, no host aggregation, no
// elastic policy. (Worker collectives inside a step are the program's to
// rule out: WorkerOptions::rejoin_in_place.) The same rule sets the job's
// JobSpec.in_place_update (SetServedVersions): a job no worker can rejoin in
// place has its shards update in place and keep one version.
bool InPlaceEligible(const WorkerOptions& o, bool host_aggregation);
bool InPlaceEligible(const JobContext& ctx);
// spec.in_place_update = !InPlaceEligible(o, spec has rank groups): call it
// once the spec's rank_groups are final.
void SetServedVersions(const WorkerOptions& o, v1::JobSpec* spec);

// The replacement's plan from every shard's stats, for data-parallel `rank`
// of the workers `ids` (registry ranks, in rank order); `buckets` has each
// shard's bucket count.
struct RejoinPlan {
  bool in_place = false;
  std::string why_not;  // when !in_place: what the stats showed
  int64_t epoch = -1;
  int64_t step = -1;  // v: the parameters to pull; the first step to compute is v + 1
  // Per shard, per bucket: 1 where the shard holds this rank's push of v + 1.
  std::vector<std::vector<uint8_t>> pushed;
  int64_t buckets_pushed = 0;
  // A push of this rank still landing on some shard (its slot reserved):
  // read the stats again.
  bool receiving = false;
  // Whether the step in flight holds its update (clipping: the survivors
  // pushed with kFrameHoldUpdate), as its pushes said: 1 held, 0 not, -1 no
  // push of it yet (the replacement waits for one: it must push the same).
  int held = -1;
};
RejoinPlan PlanRejoin(const std::vector<v1::ShardStats>& stats, int rank,
                      const std::vector<int>& ids, absl::Span<const int> buckets);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_REJOIN_H_
