// Host groups: numbering, the auto decision and the spread of buckets.
#include "worker/internal/host_groups.h"

#include <gtest/gtest.h>

namespace tessel::internal {
namespace {

TEST(HostGroupsTest, NumberedByLowestRank) {
  EXPECT_EQ(GroupsOfHosts({"b", "b", "a", "a"}), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(GroupsOfHosts({"x", "y", "x", "z", "y"}), (std::vector<int>{0, 1, 0, 2, 1}));
  EXPECT_EQ(GroupsOfHosts({}), std::vector<int>{});
}

TEST(HostGroupsTest, AutoAggregatesOnlyWhereAServerIsElsewhere) {
  const std::vector<std::string> two_hosts = {"a", "a", "b", "b"};
  AggregationPlan remote = PlanAggregation(Aggregation::kAuto, "", two_hosts, {"s1", "s2"});
  EXPECT_EQ(remote.groups, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(remote.why, "host aggregation: 2 hosts (ranks 0-1; 2-3)");

  // Every server on the workers' one host: the servers already sum there.
  AggregationPlan local = PlanAggregation(Aggregation::kAuto, "", {"a", "a"}, {"a", "a"});
  EXPECT_TRUE(local.groups.empty());
  EXPECT_EQ(local.why, "flat (the shard servers share the workers' host)");
  // Unknown server hosts do not count as another host.
  EXPECT_TRUE(PlanAggregation(Aggregation::kAuto, "", {"a", "a"}, {""}).groups.empty());
  // Forced: aggregated even so.
  EXPECT_EQ(PlanAggregation(Aggregation::kHost, "", {"a", "a"}, {"a"}).groups,
            (std::vector<int>{0, 0}));
}

TEST(HostGroupsTest, FlatWhenNothingToShareOrUnsupported) {
  AggregationPlan alone = PlanAggregation(Aggregation::kHost, "", {"a", "b"}, {"s"});
  EXPECT_TRUE(alone.groups.empty());
  EXPECT_EQ(alone.why, "flat (one worker per host)");
  AggregationPlan half = PlanAggregation(Aggregation::kHost, "mixed precision", {"a", "a"}, {"s"});
  EXPECT_TRUE(half.groups.empty());
  EXPECT_EQ(half.why, "flat (mixed precision)");
  AggregationPlan off = PlanAggregation(Aggregation::kFlat, "", {"a", "a"}, {"s"});
  EXPECT_TRUE(off.groups.empty());
  EXPECT_EQ(off.why, "flat (--aggregation=flat)");
  // Interleaved hosts are named rank by rank.
  EXPECT_EQ(PlanAggregation(Aggregation::kHost, "", {"a", "b", "a", "b"}, {"s"}).why,
            "host aggregation: 2 hosts (ranks 0,2; 1,3)");
}

TEST(HostGroupsTest, BucketsSpreadInContiguousRuns) {
  const std::vector<int> members = {1, 4, 6};
  std::vector<int> owner;
  for (int k = 0; k < 7; ++k) owner.push_back(BucketAggregator(members, k, 7));
  EXPECT_EQ(owner, (std::vector<int>{1, 1, 1, 4, 4, 6, 6}));
  // Fewer buckets than members: some aggregate none.
  EXPECT_EQ(BucketAggregator(members, 0, 1), 1);
  EXPECT_EQ(BucketAggregator({2, 3}, 1, 2), 3);
}

}  // namespace
}  // namespace tessel::internal
