// Membership: a worker's view of who takes part in its job. It joins the
// registry, finds the pool's shard servers (gRPC through a ShardFleet, UCX
// through the DataChannel), waits for the whole world, and afterwards tells
// whether anything changed that a step cannot survive: a worker left or was
// replaced, a shard server died or restarted, this worker's own lease lapsed.
// What it learns feeds two objects it owns: the host-aggregation plan
// (AggregationPlanner: who shares a host) and elastic growth (ElasticGrowth:
// newcomers and their admission).
//
// Contract:
//   - Join() returns once every rank of the world is registered, with the
//     fencing epoch set to the registry's (a newcomer, see ElasticGrowth,
//     returns once registered).
//   - Check() (run by every blocking wait) is OK while the world and the
//     servers are the ones last seen complete; otherwise it returns the
//     status a failed step carries, recoverable when recovery is on, with a
//     message that names who is missing and what to start.
//   - WaitForComplete() (recovery) waits until every rank and shard is back
//     (or, elastic, enough survivors after the grace), reconnects restarted
//     servers and says which workers go on (with growth planned, the
//     newcomers present are appended).
//   - Whenever the job is complete again, aggregation() has its view.
//
// Threads: the driving thread only. The registry client heartbeats on its own
// thread.
//
// Example:
//   Membership membership(&ctx, &channel, credentials);
//   TESSEL_RETURN_IF_ERROR(membership.Join());
//   channel.SetPeriodicCheck([&] { return membership.Check(); });
//   ...  // a step failed recoverably:
//   std::vector<int> ids;
//   TESSEL_RETURN_IF_ERROR(membership.WaitForComplete(deadline, elastic_at, &ids));
//   membership.Adopt(ids);
#ifndef TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_
#define TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/registry.pb.h"
#include "proto/shard.pb.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/aggregation_planner.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/elastic_growth.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class Membership {
 public:
  Membership(JobContext* ctx, DataChannel* channel, const ClientCredentials& credentials);
  ~Membership();  // leaves the registry

  // Finds the servers, joins the registry and waits for the whole world.
  absl::Status Join();

  ShardFleet& fleet() { return fleet_; }
  RegistryClient& registry() { return *registry_; }
  AggregationPlanner& aggregation() { return aggregation_; }
  ElasticGrowth& growth() { return growth_; }
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
  // A newcomer: the job's workers restored the shards for `ids`, which
  // include this worker; it takes its rank among them.
  absl::Status Admitted(const std::vector<int>& ids);
  // After the data channel renewed its endpoint: every server reconnects.
  void ForgetServerEndpoints();

  int64_t view_epoch() const { return view_epoch_; }
  // Registry ranks of the job's workers in data-parallel rank order.
  const std::vector<int>& member_ids() const { return member_ids_; }
  // What a recovery does once the job is whole again, for pause messages.
  std::string AfterPause() const;
  // The stragglers the servers name in this job now, one per rank in rank
  // order, as the registry's last heartbeat answer said (any thread).
  std::vector<v1::Straggler> stragglers() const;
  // Since when the servers have named this worker's rank the job's slowest
  // straggler without a break (InfiniteFuture while they do not), and its
  // entry then.
  absl::Time SlowestSince(v1::Straggler* entry) const;

 private:
  // This worker as a registry member: its registry rank and the UCX
  // address it first joined with (its identity, kept across endpoint renewals).
  v1::Member Me() const;
  absl::Status FindServers();
  absl::Status MembershipChanged();
  // A lost worker of a job that rejoins in place (rejoin.h): waits in the
  // step in flight until every rank is registered again, then goes on
  // (OK); a shard server lost or restarted meanwhile, or the workers
  // changed, is a recovery's (recoverable status: roll back); no
  // replacement within recovery_timeout fails the step.
  absl::Status WaitInPlace(const std::string& who);
  // The job is complete in `view`: it is the one changes are measured from.
  void Remember(const v1::View& view);
  absl::Status Reconnect(const v1::View& pool);
  // Shard servers of `pool` with rank < n (all of them for n = 0).
  static int ServersBelow(const v1::View& pool, int n);
  absl::Status Rejoin();
  // WaitForComplete's look at the registry's views: true with *ids set when
  // the job can go on, false with *missing saying who it waits for; Aborted
  // when this worker's rank is held by another process.
  absl::StatusOr<bool> LookForComplete(const v1::View& job, const v1::View& pool,
                                       absl::Time elastic_at, std::vector<int>* ids,
                                       std::string* missing);

  JobContext* const ctx_;
  DataChannel* const channel_;
  std::unique_ptr<RegistryClient> registry_;
  const ControlOptions control_;
  ShardFleet fleet_;
  AggregationPlanner aggregation_;
  ElasticGrowth growth_;
  std::vector<std::string> ucx_addresses_;  // per shard; "" = connect again
  std::vector<int> member_ids_;             // registry ranks in data-parallel rank order
  // Registry rank -> UCX address of the job's workers when last complete
  // (a restarted process has a new address).
  std::map<int, std::string> member_addresses_;
  // Registry rank -> the epoch its membership began at, the same view: a
  // process that lapsed and re-joined keeps its address but not this.
  std::map<int, int64_t> member_joined_;
  int64_t view_epoch_ = 0;          // registry epoch of the job group when last complete
  std::string registered_address_;  // the UCX address this worker joined with
  std::function<absl::Status()> wait_check_;
  // Written by the heartbeat thread's straggler listener, which shares it.
  struct Named {
    mutable absl::Mutex mu;
    std::map<int, v1::Straggler> now ABSL_GUARDED_BY(mu);                   // by data-parallel rank
    absl::Time slowest_since ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();  // this rank's
  };
  std::shared_ptr<Named> named_ = std::make_shared<Named>();
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_MEMBERSHIP_H_
