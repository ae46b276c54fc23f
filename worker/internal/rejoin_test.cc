#include "worker/internal/rejoin.h"

#include <gtest/gtest.h>

namespace tessel::internal {
namespace {

// A shard's stats: initialized at `step`, epoch 3, workers 0..1; `waiting`
// adds the step in flight with `rank` owing `not_pushed` (and `receiving`).
v1::ShardStats Shard(int64_t step, bool in_flight = false, int rank = -1,
                     std::vector<int> not_pushed = {}, std::vector<int> receiving = {}) {
  v1::ShardStats st;
  st.set_initialized(true);
  st.set_epoch(3);
  st.set_step(step);
  st.set_world_size(2);
  if (in_flight) {
    v1::StepWaiting* w = st.mutable_waiting();
    w->set_step(step);
    if (rank >= 0) {
      v1::SlotWaiting* slot = w->add_slots();
      slot->set_slot(rank);
      for (int b : not_pushed) slot->add_not_pushed(b);
      for (int b : receiving) slot->add_receiving(b);
    }
  }
  return st;
}

const std::vector<int> kIds = {0, 1};
const std::vector<int> kBuckets = {3, 2};

TEST(PlanRejoin, NothingPushedWhereNoStepIsInFlight) {
  const RejoinPlan plan = PlanRejoin({Shard(7), Shard(7)}, 1, kIds, kBuckets);
  ASSERT_TRUE(plan.in_place) << plan.why_not;
  EXPECT_EQ(plan.epoch, 3);
  EXPECT_EQ(plan.step, 7);
  EXPECT_EQ(plan.pushed, (std::vector<std::vector<uint8_t>>{{0, 0, 0}, {0, 0}}));
  EXPECT_EQ(plan.buckets_pushed, 0);
  EXPECT_FALSE(plan.receiving);
}

TEST(PlanRejoin, TheBucketsTheRankOwesAreTheOnlyOnesLeftToPush) {
  // Shard 0: rank 1 owes bucket 2 of step 8; shard 1: the survivors pushed,
  // rank 1 owes both.
  const RejoinPlan plan =
      PlanRejoin({Shard(7, true, 1, {2}), Shard(7, true, 1, {0, 1})}, 1, kIds, kBuckets);
  ASSERT_TRUE(plan.in_place) << plan.why_not;
  EXPECT_EQ(plan.pushed, (std::vector<std::vector<uint8_t>>{{1, 1, 0}, {0, 0}}));
  EXPECT_EQ(plan.buckets_pushed, 2);
}

TEST(PlanRejoin, ARankNotListedOwesNothingOnThatShard) {
  // Shard 0 waits only for rank 0 (a survivor still computing).
  const RejoinPlan plan = PlanRejoin({Shard(7, true, 0, {0}), Shard(7)}, 1, kIds, kBuckets);
  ASSERT_TRUE(plan.in_place);
  EXPECT_EQ(plan.pushed, (std::vector<std::vector<uint8_t>>{{1, 1, 1}, {0, 0}}));
}

TEST(PlanRejoin, AShardAStepAheadHasEveryPushOfThatStep) {
  const RejoinPlan plan = PlanRejoin({Shard(8), Shard(7, true, 1, {1})}, 1, kIds, kBuckets);
  ASSERT_TRUE(plan.in_place) << plan.why_not;
  EXPECT_EQ(plan.step, 7);
  EXPECT_EQ(plan.pushed, (std::vector<std::vector<uint8_t>>{{1, 1, 1}, {1, 0}}));
  EXPECT_EQ(plan.buckets_pushed, 4);
}

TEST(PlanRejoin, APushStillLandingIsNotCountedAndAsksForAnotherLook) {
  const RejoinPlan plan = PlanRejoin({Shard(7, true, 1, {}, {0}), Shard(7)}, 1, kIds, kBuckets);
  ASSERT_TRUE(plan.in_place);
  EXPECT_TRUE(plan.receiving);
  EXPECT_EQ(plan.pushed[0], (std::vector<uint8_t>{0, 1, 1}));
}

TEST(PlanRejoin, RefusesWhatIsNotOneJobInOneStep) {
  v1::ShardStats other_epoch = Shard(7);
  other_epoch.set_epoch(4);
  EXPECT_FALSE(PlanRejoin({Shard(7), other_epoch}, 1, kIds, kBuckets).in_place);
  EXPECT_FALSE(PlanRejoin({Shard(7), Shard(9)}, 1, kIds, kBuckets).in_place);
  EXPECT_FALSE(PlanRejoin({Shard(7)}, 1, kIds, kBuckets).in_place);
  EXPECT_FALSE(PlanRejoin({Shard(7), Shard(7)}, 1, {0, 2}, kBuckets).in_place);
  v1::ShardStats fresh = Shard(0);
  fresh.set_initialized(false);
  const RejoinPlan plan = PlanRejoin({fresh, Shard(0)}, 1, kIds, kBuckets);
  EXPECT_FALSE(plan.in_place);
  EXPECT_NE(plan.why_not.find("shard 0"), std::string::npos) << plan.why_not;
  v1::ShardStats groups = Shard(7, true, 1, {0});
  groups.mutable_waiting()->set_host_groups(true);
  EXPECT_FALSE(PlanRejoin({groups, Shard(7)}, 1, kIds, kBuckets).in_place);
}

TEST(InPlaceEligible, ShardStateJobsWithRecoveryAndNoElasticOrHostGroups) {
  WorkerOptions o;
  o.recovery = true;
  o.strategy = Strategy::kZero2;
  EXPECT_TRUE(InPlaceEligible(JobContext(o)));
  o.strategy = Strategy::kZero1;
  EXPECT_TRUE(InPlaceEligible(JobContext(o)));
  o.strategy = Strategy::kFsdp;
  EXPECT_TRUE(InPlaceEligible(JobContext(o)));
  WorkerOptions ddp = o;
  ddp.strategy = Strategy::kDdp;
  EXPECT_FALSE(InPlaceEligible(JobContext(ddp)));
  WorkerOptions off = o;
  off.rejoin_in_place = false;
  EXPECT_FALSE(InPlaceEligible(JobContext(off)));
  WorkerOptions no_recovery = o;
  no_recovery.recovery = false;
  EXPECT_FALSE(InPlaceEligible(JobContext(no_recovery)));
  WorkerOptions elastic = o;
  elastic.elastic_min_workers = 1;
  EXPECT_FALSE(InPlaceEligible(JobContext(elastic)));
  JobContext grouped(o);
  grouped.rank_groups = {0, 0};
  EXPECT_FALSE(InPlaceEligible(grouped));
}

// The job's spec follows the same rule: the shards of a job no worker can
// rejoin keep one served version and update in place (server/served_versions.h).
TEST(SetServedVersions, InPlaceUpdateExactlyWhereNoWorkerRejoins) {
  WorkerOptions o;
  o.recovery = true;
  o.strategy = Strategy::kZero2;
  v1::JobSpec spec;
  SetServedVersions(o, &spec);
  EXPECT_FALSE(spec.in_place_update()) << "rejoins in place: two versions";
  WorkerOptions off = o;
  off.rejoin_in_place = false;
  SetServedVersions(off, &spec);
  EXPECT_TRUE(spec.in_place_update());
  WorkerOptions no_recovery = o;
  no_recovery.recovery = false;
  SetServedVersions(no_recovery, &spec);
  EXPECT_TRUE(spec.in_place_update());
  WorkerOptions ddp = o;
  ddp.strategy = Strategy::kDdp;
  SetServedVersions(ddp, &spec);
  EXPECT_TRUE(spec.in_place_update());
  SetServedVersions(o, &spec);
  EXPECT_FALSE(spec.in_place_update()) << "set both ways";
  spec.add_rank_groups(0);
  spec.add_rank_groups(0);
  SetServedVersions(o, &spec);
  EXPECT_TRUE(spec.in_place_update()) << "host aggregation does not rejoin in place";
}

}  // namespace
}  // namespace tessel::internal
