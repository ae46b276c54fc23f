// Host groups: which ranks of a job aggregate together (hierarchical
// aggregation, docs/hierarchical.md), and which rank of a group sums which
// bucket. Pure functions of what every rank reads from the registry, so every
// rank computes the same plan.
//
// Contract:
//   - GroupsOfHosts numbers groups by their lowest rank (group 0 holds rank
//     0), as JobSpec.rank_groups wants.
//   - PlanAggregation returns the groups to put in the JobSpec, or none
//     (flat), with a sentence saying which and why for Worker::aggregation().
//   - BucketAggregator spreads a group's buckets over its members in
//     contiguous runs of the job's bucket order (shard-major), so each member
//     sums about 1/L of the model and pulls one contiguous range per shard.
//
// Threads: none (pure).
//
// Example:
//   AggregationPlan plan = PlanAggregation(Aggregation::kAuto, "", {"a", "a", "b", "b"},
//                                          {"s1", "s2"});
//   // plan.groups == {0, 0, 1, 1}; plan.why == "host aggregation: 2 hosts (ranks 0-1; 2-3)"
//   int sums = BucketAggregator({0, 1}, /*k=*/3, /*total=*/4);  // rank 1
#ifndef TESSEL_WORKER_INTERNAL_HOST_GROUPS_H_
#define TESSEL_WORKER_INTERNAL_HOST_GROUPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/options.h"

namespace tessel::internal {

// Per rank, its group: ranks with equal host ids share one.
std::vector<int> GroupsOfHosts(const std::vector<std::string>& host_of_rank);

struct AggregationPlan {
  std::vector<int> groups;  // per rank; empty = flat
  std::string why;          // e.g. "host aggregation: 2 hosts (ranks 0-1, 2-3)"
};

// `unsupported`: why this job cannot aggregate inside a host ("" if it can).
// `server_hosts`: host id per shard server ("" = unknown: not counted as
// another host).
AggregationPlan PlanAggregation(Aggregation mode, absl::string_view unsupported,
                                const std::vector<std::string>& worker_hosts,
                                const std::vector<std::string>& server_hosts);

// The rank of `members` (a group's ranks, ascending) that sums global
// bucket `k` of `total` (buckets numbered shard-major).
int BucketAggregator(const std::vector<int>& members, int64_t k, int64_t total);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_HOST_GROUPS_H_
