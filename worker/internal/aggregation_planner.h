// AggregationPlanner: hierarchical aggregation (docs/hierarchical.md) for a
// worker's job as the registry describes it: which ranks share a host, from
// the host ids the workers and the shard servers registered with, and the
// endpoints to the other workers of this worker's host that the plan needs.
// The grouping itself is host_groups.h's (pure); this object adds what it
// reads from the registry and what it connects.
//
// Contract:
//   - Plan(ids) is a function of the views last given (SetWorkers,
//     SetServerHosts), so every rank that was given the same views computes
//     the same plan. A worker the view lacks, or one without a host id, is a
//     host of its own (never grouped).
//   - Use(plan, ids) connects (once per UCX address) to every other worker
//     of this worker's group, hands the endpoints to the DataChannel, and
//     sets ctx rank_groups and aggregation; a peer the view lacks or that
//     cannot be reached is a recoverable Unavailable that says
//     --aggregation=flat does without.
//   - ForgetEndpoints() (the worker's endpoint was renewed) makes the next
//     Use connect again.
//
// Threads: the driving thread only.
//
// Example:
//   AggregationPlanner planner(&ctx, &channel);
//   planner.SetServerHosts({"host-a", "host-b"});  // per shard
//   planner.SetWorkers(job_view);                  // the job's group, complete
//   const AggregationPlan plan = planner.Plan({0, 1, 2, 3});
//   TESSEL_RETURN_IF_ERROR(planner.Use(plan, {0, 1, 2, 3}));
//   // ctx.rank_groups == plan.groups; plan.why says which hosts
#ifndef TESSEL_WORKER_INTERNAL_AGGREGATION_PLANNER_H_
#define TESSEL_WORKER_INTERNAL_AGGREGATION_PLANNER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/registry.pb.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/host_groups.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class AggregationPlanner {
 public:
  AggregationPlanner(JobContext* ctx, DataChannel* channel);

  // The job's group as the registry showed it: each worker's host id and
  // UCX address by registry rank (other roles are ignored).
  void SetWorkers(const v1::View& job);
  // Per shard: the host id its server registered ("" = unknown).
  void SetServerHosts(std::vector<std::string> hosts) { server_hosts_ = std::move(hosts); }
  void SetServerHost(int shard, std::string host) {
    server_hosts_[static_cast<size_t>(shard)] = std::move(host);
  }

  // The plan for the workers `ids` (registry ranks in data-parallel order).
  AggregationPlan Plan(const std::vector<int>& ids) const;
  // Takes `plan` for `ids` (this worker is ids[ctx->rank]).
  absl::Status Use(const AggregationPlan& plan, const std::vector<int>& ids);
  void ForgetEndpoints() { endpoints_.clear(); }

 private:
  JobContext* const ctx_;
  DataChannel* const channel_;
  std::map<int, std::string> hosts_;       // registry rank -> host id
  std::map<int, std::string> addresses_;   // registry rank -> UCX address
  std::vector<std::string> server_hosts_;  // per shard
  // Endpoints to other workers of this host by UCX address, kept while the
  // address stays (a second endpoint to one peer is not made).
  std::map<std::string, PeerId> endpoints_;
};

// Why this job's workers cannot sum inside a host ("" if they can).
std::string HostAggregationUnsupported(const JobContext& ctx);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_AGGREGATION_PLANNER_H_
