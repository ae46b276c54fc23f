// RecoveryCoordinator's decisions, apart from the waiting and the RPCs
// around them (the protocol end to end runs in worker/worker_test.cc):
// when the shards' stats show a restore every worker may take, and which
// rank's state a DDP job aligns on.
#include "worker/internal/recovery.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

v1::ShardStats Stats(int64_t epoch, int64_t step, int64_t restored_from,
                     const std::vector<int>& ids) {
  v1::ShardStats st;
  st.set_epoch(epoch);
  st.set_step(step);
  st.set_restored_from_step(restored_from);
  st.set_world_size(static_cast<int>(ids.size()));
  for (int id : ids) st.add_worker_ids(id);
  return st;
}

TEST(ReadRestoreTest, ReadyWhenEveryShardHoldsTheSameNewerRestoreStillAtItsStep) {
  const std::vector<v1::ShardStats> same = {Stats(9, 40, 40, {0, 2}), Stats(9, 40, 40, {0, 2})};
  RestoreSeen seen = ReadRestore(same, /*after_epoch=*/8);
  EXPECT_TRUE(seen.ready);
  EXPECT_EQ(seen.epoch, 9);
  EXPECT_EQ(seen.step, 40);
  EXPECT_EQ(seen.ids, (std::vector<int>{0, 2}));

  // Not newer than what this worker knew when the failure struck.
  seen = ReadRestore(same, 9);
  EXPECT_FALSE(seen.ready);
  EXPECT_EQ(seen.last, "shard 0 at epoch 9 step 40 (restored from 40)");
  // A step was taken since: not a restore anyone may still join.
  seen = ReadRestore({Stats(9, 40, 40, {0, 2}), Stats(9, 41, 40, {0, 2})}, 8);
  EXPECT_FALSE(seen.ready);
  EXPECT_EQ(seen.last, "shard 1 at epoch 9 step 41 (restored from 40)");
  // Shards restored by two different recoveries.
  seen = ReadRestore({Stats(9, 40, 40, {0, 1}), Stats(10, 40, 40, {0, 1})}, 8);
  EXPECT_FALSE(seen.ready);
  // One restore, two different worker lists.
  seen = ReadRestore({Stats(9, 40, 40, {0, 1}), Stats(9, 40, 40, {0})}, 8);
  EXPECT_FALSE(seen.ready);
  EXPECT_EQ(seen.last, "shard 1 restored for workers 0, another shard for 0,1");
}

TEST(ReadRestoreTest, NoRecordedWorkersMeansTheWholeWorld) {
  v1::ShardStats st = Stats(3, 0, 0, {});
  st.set_world_size(3);
  const RestoreSeen seen = ReadRestore({st, st}, 2);
  ASSERT_TRUE(seen.ready);
  EXPECT_EQ(seen.ids, (std::vector<int>{0, 1, 2}));
}

TEST(PlanDdpAlignmentTest, TheLowestRankAtTheHighestStepDonatesAndTheOthersAreNamed) {
  // Rank 0 at step 4, rank 1 a replacement, ranks 2 and 3 at step 5 with
  // different states: rank 2 donates.
  const std::vector<uint64_t> words = {5, 111, 0, 0, 6, 222, 6, 333};
  const DdpAlignment plan = PlanDdpAlignment(words, 4);
  EXPECT_EQ(plan.donor, 2);
  EXPECT_EQ(plan.step, 5);
  EXPECT_EQ(plan.behind, (std::vector<std::string>{"0 (at step 4)", "1 (no state: a replacement)",
                                                   "3 (same step, other state)"}));
  // Everyone alike: nothing to copy.
  const DdpAlignment alike = PlanDdpAlignment(std::vector<uint64_t>{3, 7, 3, 7}, 2);
  EXPECT_EQ(alike.donor, 0);
  EXPECT_EQ(alike.step, 2);
  EXPECT_TRUE(alike.behind.empty());
  // Nobody holds state.
  EXPECT_EQ(PlanDdpAlignment(std::vector<uint64_t>{0, 0, 0, 0}, 2).donor, -1);
}

TEST(PlanDdpAlignmentTest, AgreesWithItsDefinitionOnRandomWorlds) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 2000; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 6);
    std::vector<uint64_t> words;
    for (int r = 0; r < world; ++r) {
      words.push_back(rng() % 4);      // step + 1, 0 = no state
      words.push_back(rng() % 2 + 1);  // digest
    }
    const DdpAlignment plan = PlanDdpAlignment(words, world);
    uint64_t top = 0;
    for (int r = 0; r < world; ++r) top = std::max(top, words[2 * r]);
    if (top == 0) {
      EXPECT_EQ(plan.donor, -1);
      continue;
    }
    ASSERT_GE(plan.donor, 0);
    EXPECT_EQ(words[2 * plan.donor], top);
    for (int r = 0; r < plan.donor; ++r) EXPECT_LT(words[2 * r], top) << r;
    EXPECT_EQ(plan.step, static_cast<int64_t>(top) - 1);
    size_t differ = 0;
    for (int r = 0; r < world; ++r) {
      differ += words[2 * r] != top || words[2 * r + 1] != words[2 * plan.donor + 1];
    }
    EXPECT_EQ(plan.behind.size(), differ);
  }
}

}  // namespace
}  // namespace tessel::internal
