// Membership: a worker's view of who takes part in its job. It joins the
// registry, finds the pool's shard servers (gRPC through a ShardFleet, UCX
// through the DataChannel), waits for the whole world, and afterwards tells
// whether anything changed that a step cannot survive: a worker left or was
// replaced, a shard server died or restarted, this worker's own lease lapsed.
//
// Contract:
//   - Join() returns once every rank of the world is registered, with the
//     fencing epoch set to the registry's.
//   - Check() (run by every blocking wait) is OK while the world and the
//     servers are the ones last seen complete; otherwise it returns the
//     status a failed step carries, recoverable when recovery is on, with a
//     message that names who is missing and what to start.
//   - WaitForComplete() (recovery) waits until every rank and shard is back
//     (or, elastic, enough survivors after the grace), reconnects restarted
//     servers and says which workers go on (with growth planned, the
//     newcomers present are appended).
//   - A newcomer (elastic growth: a rank the running job does not have)
//     joins the registry without waiting for a world; the job's workers see
//     it in Newcomers() and admit it at a checkpoint boundary.
//
// Threads: the driving thread only. The registry client heartbeats on its own
// thread.
#ifndef TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_
#define TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/registry.pb.h"
#include "proto/shard.pb.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/host_groups.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

// The registry ranks of a job's workers as a shard records them: the list
// its last recovery wrote, or 0..world_size-1 when none has.
std::vector<int> WorkerIdsOf(const v1::ShardStats& stats);

class Membership {
 public:
  Membership(JobContext* ctx, DataChannel* channel, const ClientCredentials& credentials);
  ~Membership();  // leaves the registry

  // Finds the servers, joins the registry and waits for the whole world.
  absl::Status Join();

  ShardFleet& fleet() { return fleet_; }
  RegistryClient& registry() { return *registry_; }
  // A control-plane client of the pool's shard servers as registered now
  // (a restarted one at its new address, which fleet() learns only when a
  // recovery reconnects), once every shard is registered; Unavailable
  // (recoverable) if they are not by `deadline`. For calls made before the
  // recovery proper, e.g. listing checkpoints to agree on one.
  absl::StatusOr<std::unique_ptr<ShardFleet>> CurrentFleet(absl::Time deadline);
  int num_servers() const { return static_cast<int>(ucx_addresses_.size()); }
  // Per shard: the UCX address this worker reached it at ("" = not reached).
  const std::vector<std::string>& ucx_addresses() const { return ucx_addresses_; }

  // What every blocking wait runs: lease, members, servers, then the
  // caller's own check (SetWaitCheck).
  absl::Status Check();
  void SetWaitCheck(std::function<absl::Status()> check) { wait_check_ = std::move(check); }
  // OK unless one of the job's workers left or was replaced since the
  // membership was last complete.
  absl::Status CheckMembers();
  // OK while every shard server is registered at the UCX address we know.
  absl::Status CheckServers();

  // Recovery: waits (until `deadline`) for every worker and shard; sets
  // *ids to the workers that go on (registry ranks in data-parallel order;
  // elastic: the survivors after `elastic_at`) and reconnects restarted
  // servers.
  absl::Status WaitForComplete(absl::Time deadline, absl::Time elastic_at, std::vector<int>* ids);
  // Takes on the workers a recovery settled on (elastic: renumbered
  // survivors, or the workers and the newcomers they admitted).
  void Adopt(const std::vector<int>& ids);

  // --- elastic growth (WorkerOptions::elastic_max_workers) ---
  // True from Join() until Admitted() when this worker is not one of the
  // running job's workers: it waits to be admitted at a checkpoint boundary.
  bool newcomer() const { return newcomer_; }
  // A newcomer: the shards' epoch when it joined (only a restore at a newer
  // epoch can admit it).
  int64_t join_epoch() const { return join_epoch_; }
  // A newcomer: the job's workers restored the shards for `ids`, which
  // include this worker; it takes its rank among them.
  absl::Status Admitted(const std::vector<int>& ids);
  // Registry ranks of the workers registered for the job that are not among
  // its workers (newcomers waiting), ascending; empty if the registry cannot
  // be read.
  std::vector<int> Newcomers();
  // The job's workers agreed at the boundary `step` to admit `newcomers`:
  // the next WaitForComplete appends those present to the workers that go
  // on. growth_step() is -1 when no growth is planned.
  void PlanGrowth(std::vector<int> newcomers, int64_t step);
  int64_t growth_step() const { return growth_step_; }
  void ClearGrowth();
  // After the data channel renewed its endpoint: every server reconnects.
  void ForgetServerEndpoints();

  // Hierarchical aggregation for the workers `ids` (registry ranks in
  // data-parallel order), from the host ids they and the servers registered:
  // the same on every rank (host_groups.h).
  AggregationPlan PlanAggregation(const std::vector<int>& ids) const;
  // Takes `plan` for `ids`: ctx rank_groups and aggregation, and an endpoint
  // to every other worker of this worker's group.
  absl::Status UseAggregation(const AggregationPlan& plan, const std::vector<int>& ids);

  int64_t view_epoch() const { return view_epoch_; }
  // Registry ranks of the job's workers in data-parallel rank order.
  const std::vector<int>& member_ids() const { return member_ids_; }
  // What a recovery does once the job is whole again, for pause messages.
  std::string AfterPause() const;

 private:
  // This worker as a registry member: its registry rank and the UCX
  // address it first joined with (its identity, kept across endpoint renewals).
  v1::Member Me() const;
  absl::Status FindServers();
  // Whether this worker is one of the running job's workers, a newcomer
  // (growth on) or a late replacement to refuse (growth off).
  absl::Status ClassifyJoin();
  absl::Status RefuseLateReplacement();
  absl::Status MembershipChanged();
  void Remember(const v1::View& view);
  absl::Status Reconnect(const v1::View& pool);
  absl::Status Rejoin();

  JobContext* const ctx_;
  DataChannel* const channel_;
  std::unique_ptr<RegistryClient> registry_;
  const ControlOptions control_;
  ShardFleet fleet_;
  std::vector<std::string> ucx_addresses_;  // per shard; "" = connect again
  std::vector<int> member_ids_;             // registry ranks in data-parallel rank order
  // Registry rank -> UCX address of the job's workers when last complete
  // (a restarted process has a new address).
  std::map<int, std::string> member_addresses_;
  std::map<int, std::string> member_hosts_;  // registry rank -> host id, the same view
  // Registry rank -> the epoch its membership began at, the same view: a
  // process that lapsed and re-joined keeps its address but not this.
  std::map<int, int64_t> member_joined_;
  std::vector<std::string> server_hosts_;  // per shard: host id ("" = unknown)
  // Endpoints to other workers of this host by UCX address, kept while the
  // address stays (a second endpoint to one peer is not made).
  std::map<std::string, PeerId> worker_endpoints_;
  int64_t view_epoch_ = 0;          // registry epoch of the job group when last complete
  std::string registered_address_;  // the UCX address this worker joined with
  std::function<absl::Status()> wait_check_;
  bool newcomer_ = false;
  int64_t join_epoch_ = 0;
  std::vector<int> growth_;  // newcomers agreed on at growth_step_
  int64_t growth_step_ = -1;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_
