// ElasticGrowth: a job that takes in new workers while it runs
// (WorkerOptions::elastic_max_workers, docs/architecture.md "Recovery").
// It says, when a worker joins, whether it is one of the running job's
// workers or a newcomer to be admitted at a checkpoint boundary (and, growth
// off, refuses a late replacement the job went on without); which newcomers
// the registry shows; and, once the job's workers agreed on some
// (growth_policy.h), which of them the next recovery admits.
//
// Contract:
//   - ClassifyJoin() asks shard 0 for the job's workers (GetStats). This
//     worker is a newcomer when it is not among them and growth is on: it
//     takes the running job's world size and a prospective rank at its end,
//     and remembers the shards' epoch (only a restore at a newer one can
//     admit it). FailedPrecondition when the job is full or (growth off) went
//     on without this worker; a rank beyond the world waits (connect_timeout)
//     for the job to start.
//   - Newcomers(members): registry ranks of the job's group that are not
//     `members`, ascending; empty if the registry cannot be read.
//   - Plan(newcomers, step) / Clear(): the agreement of the boundary `step`;
//     step() is -1 when none is planned. Present(view) keeps the agreed
//     newcomers the view still has, in the agreed order.
//
// Threads: the driving thread only.
//
// Example:
//   ElasticGrowth growth(&ctx, &registry, &fleet);
//   TESSEL_ASSIGN_OR_RETURN(std::optional<std::vector<int>> running, growth.ClassifyJoin());
//   if (growth.newcomer()) member_ids = *running;  // wait to be admitted
//   ...
//   growth.Plan(AgreedNewcomers(all, world, slots), step);  // on every worker
//   std::vector<int> ids = survivors;
//   for (int n : growth.Present(job_view)) ids.push_back(n);
#ifndef TESSEL_WORKER_INTERNAL_ELASTIC_GROWTH_H_
#define TESSEL_WORKER_INTERNAL_ELASTIC_GROWTH_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/registry.pb.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class ElasticGrowth {
 public:
  ElasticGrowth(JobContext* ctx, RegistryClient* registry, ShardFleet* fleet);

  // The running job's workers (registry ranks) when this worker joins as a
  // newcomer; nullopt when it is one of the job's workers (or the job is
  // not running yet and it is a rank of the world).
  absl::StatusOr<std::optional<std::vector<int>>> ClassifyJoin();
  // True from ClassifyJoin until Admitted when this worker is a newcomer.
  bool newcomer() const { return newcomer_; }
  // A newcomer: the shards' epoch when it joined.
  int64_t join_epoch() const { return join_epoch_; }
  void Admitted() { newcomer_ = false; }

  std::vector<int> Newcomers(const std::vector<int>& members);
  void Plan(std::vector<int> newcomers, int64_t step);
  void Clear();
  int64_t step() const { return step_; }
  std::vector<int> Present(const v1::View& job) const;

 private:
  // Growth off: a resumed worker the job went on without (elastic) would
  // only disturb the survivors.
  absl::Status RefuseLateReplacement();

  JobContext* const ctx_;
  RegistryClient* const registry_;
  ShardFleet* const fleet_;
  bool newcomer_ = false;
  int64_t join_epoch_ = 0;
  std::vector<int> agreed_;  // newcomers agreed on at step_
  int64_t step_ = -1;
};

// The registry ranks of a job's workers as a shard records them: the list
// its last recovery wrote, or 0..world_size-1 when none has.
std::vector<int> WorkerIdsOf(const v1::ShardStats& stats);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_ELASTIC_GROWTH_H_
