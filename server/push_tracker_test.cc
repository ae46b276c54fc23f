// PushTracker: slot transitions, bucket completion in any arrival order, the
// stall clock's start, stop and once-per-period reports, and the
// descriptions of what a step waits for.
#include "server/push_tracker.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

using Slot = PushTracker::Slot;
const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Issue 44: the receives a replaced rank left unfinished are abandoned: the
// slots are owed again, and a completion holding an abandoned ticket is not
// the slot's, even once the replacement reserved it again or the step ended.
TEST(PushTrackerTest, AbandonedReceivesAreOwedAgainAndTheirTicketsHoldNothing) {
  PushTracker t(/*num_buckets=*/3, /*world=*/2);
  const uint64_t r0 = t.Reserve(0, 0, kT0);
  const uint64_t dying0 = t.Reserve(0, 1, kT0);
  const uint64_t dying2 = t.Reserve(2, 1, kT0, /*sender=*/1, /*part=*/4);
  const uint64_t landed = t.Reserve(1, 1, kT0);
  EXPECT_FALSE(t.Receive(1, 1));
  EXPECT_NE(dying0, r0);
  EXPECT_NE(dying2, dying0);
  EXPECT_TRUE(t.Holds(0, 1, dying0));
  EXPECT_TRUE(t.Holds(0, 1, 0)) << "0: whatever reservation the slot holds";
  EXPECT_FALSE(t.Holds(0, 1, r0)) << "another slot's ticket";
  EXPECT_FALSE(t.Holds(1, 1, landed)) << "landed: no longer receiving";

  const std::vector<PushTracker::Abandoned> gone = t.Abandon(1);
  ASSERT_EQ(gone.size(), 2u) << "rank 1's receiving slots only";
  EXPECT_EQ(gone[0].bucket, 0);
  EXPECT_EQ(gone[0].slot, 1);
  EXPECT_EQ(gone[0].part, -1);
  EXPECT_EQ(gone[1].bucket, 2);
  EXPECT_EQ(gone[1].part, 4);
  EXPECT_EQ(t.slot(0, 1), Slot::kEmpty);
  EXPECT_EQ(t.slot(2, 1), Slot::kEmpty);
  EXPECT_EQ(t.slot(1, 1), Slot::kReceived) << "what landed stays";
  EXPECT_EQ(t.slot(0, 0), Slot::kReceiving) << "other ranks' receives go on";
  EXPECT_TRUE(t.Holds(0, 0, r0));
  EXPECT_FALSE(t.Holds(0, 1, dying0));
  EXPECT_FALSE(t.Holds(0, 1, 0));
  const std::vector<PushTracker::SlotWaiting> waiting = t.WaitingSlots();
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[1].not_pushed, (std::vector<int>{0, 2})) << "owed again";
  EXPECT_TRUE(waiting[1].receiving.empty());
  EXPECT_TRUE(t.Abandon(1).empty()) << "nothing left to abandon";

  // The replacement reserves bucket 0 again: a new ticket; the abandoned one
  // still holds nothing, and completes nothing.
  const uint64_t again = t.Reserve(0, 1, kT0);
  EXPECT_NE(again, dying0);
  EXPECT_FALSE(t.Holds(0, 1, dying0));
  EXPECT_TRUE(t.Holds(0, 1, again));
  EXPECT_FALSE(t.Receive(0, 1));
  EXPECT_FALSE(t.Holds(0, 1, dying0));
  // After the step ends the abandoned tickets hold nothing either.
  EXPECT_TRUE(t.Receive(0, 0));
  t.NextStep(0, kT0);
  const uint64_t next = t.Reserve(0, 1, kT0);
  EXPECT_FALSE(t.Holds(0, 1, dying0));
  EXPECT_FALSE(t.Holds(0, 1, again));
  EXPECT_TRUE(t.Holds(0, 1, next));
  // Host groups: a slot reserved by a rank of the group is that rank's.
  PushTracker groups(1, 2);
  groups.Reserve(0, /*slot=*/1, kT0, /*sender=*/3);
  EXPECT_TRUE(groups.Abandon(1).empty());
  EXPECT_EQ(groups.Abandon(3).size(), 1u);
}

TEST(PushTrackerTest, SlotsMoveFromEmptyThroughReceivingToReceived) {
  PushTracker t(2, 2);
  EXPECT_FALSE(t.AnyPushed());
  t.Reserve(1, 0, kT0);
  EXPECT_EQ(t.slot(1, 0), Slot::kReceiving);
  EXPECT_EQ(t.slot(0, 0), Slot::kEmpty);
  EXPECT_TRUE(t.AnyPushed());
  t.Release(1, 0);  // the receive failed: the rank may push again
  EXPECT_EQ(t.slot(1, 0), Slot::kEmpty);
  EXPECT_FALSE(t.AnyPushed());
  t.Reserve(1, 0, kT0);
  EXPECT_FALSE(t.Receive(1, 0));
  EXPECT_EQ(t.slot(1, 0), Slot::kReceived);
  t.Reserve(1, 1, kT0);
  EXPECT_TRUE(t.Receive(1, 1)) << "the last rank completes the bucket";
  t.NextStep(/*step=*/0, absl::UnixEpoch());
  for (int b = 0; b < 2; ++b) {
    for (int r = 0; r < 2; ++r) EXPECT_EQ(t.slot(b, r), Slot::kEmpty);
  }
  EXPECT_FALSE(t.AnyPushed());
}

// Issue 42: the step's micro-batch parts (server/push_parts_test.cc) are
// taken again only after the version moves.
TEST(PushTrackerTest, TheNextStepFreesEveryPart) {
  PushTracker t(2, 2);
  ASSERT_TRUE(t.parts().Take(0, 1, 0, 1).ok());
  ASSERT_TRUE(t.parts().Take(1, 0, 3, 1).ok());
  EXPECT_FALSE(t.parts().Take(0, 1, 0, 1).ok()) << "replayed";
  t.StopClock();
  EXPECT_FALSE(t.parts().Take(0, 1, 0, 1).ok()) << "a stopped clock is no new step";
  t.NextStep(/*step=*/0, absl::UnixEpoch());
  EXPECT_EQ(t.parts().size(), 0u);
  EXPECT_TRUE(t.parts().Take(0, 1, 0, 2).ok());
}

// The stall report's clause (docs/errors.md): pushes missing, receives on
// their way, either alone, or nothing.
TEST(PushTrackerTest, WaitingReadsAsTheStallReportsClause) {
  PushTracker t(4, 2);
  EXPECT_EQ(t.DescribeWaiting({}).ToString(),
            "waiting for pushes from rank 0 (buckets 0-3 of 4), rank 1 (buckets 0-3 of 4)");
  for (int b = 0; b < 4; ++b) t.Reserve(b, 0, kT0);
  t.Reserve(2, 1, kT0);
  EXPECT_EQ(t.DescribeWaiting({}).ToString(),
            "waiting for pushes from rank 1 (buckets 0-1, 3 of 4); receives not finished from "
            "rank 0 (buckets 0-3 of 4), rank 1 (bucket 2 of 4)");
  for (int b : {0, 1, 3}) t.Reserve(b, 1, kT0);
  EXPECT_EQ(t.DescribeWaiting({}).ToString(),
            "receives not finished from rank 0 (buckets 0-3 of 4), rank 1 (buckets 0-3 of 4)");
  for (int b = 0; b < 4; ++b) {
    for (int r = 0; r < 2; ++r) t.Receive(b, r);
  }
  EXPECT_TRUE(t.DescribeWaiting({}).empty());
  EXPECT_EQ(t.DescribeWaiting({}).ToString(), "");
  EXPECT_EQ(PushTracker::Waiting{}.ToString(), "");
  EXPECT_TRUE(PushTracker::Waiting{}.empty());
}

// Whatever the order of reserves and receives, each bucket completes exactly
// once, on its last rank's receive.
TEST(PushTrackerTest, EveryBucketCompletesOnceInAnyOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int buckets = 1 + static_cast<int>(rng() % 6);
    const int world = 1 + static_cast<int>(rng() % 5);
    PushTracker t(buckets, world);
    std::vector<std::pair<int, int>> pushes;
    for (int b = 0; b < buckets; ++b) {
      for (int r = 0; r < world; ++r) pushes.emplace_back(b, r);
    }
    std::shuffle(pushes.begin(), pushes.end(), rng);
    for (auto [b, r] : pushes) t.Reserve(b, r, kT0);
    std::shuffle(pushes.begin(), pushes.end(), rng);
    std::vector<int> landed(buckets, 0), completed(buckets, 0);
    for (auto [b, r] : pushes) {
      const bool done = t.Receive(b, r);
      ++landed[b];
      EXPECT_EQ(done, landed[b] == world);
      completed[b] += done;
    }
    EXPECT_EQ(std::accumulate(completed.begin(), completed.end(), 0), buckets);
    t.NextStep(/*step=*/0, absl::UnixEpoch());
    EXPECT_FALSE(t.AnyPushed());
  }
}

TEST(PushTrackerTest, StallClockReportsOncePerPeriodAndStopsWithTheStep) {
  const absl::Duration after = absl::Seconds(10);
  PushTracker t(1, 2);
  EXPECT_FALSE(t.StallDue(kT0 + absl::Hours(1), after)) << "no step in progress";
  t.Reserve(0, 0, kT0);
  t.Reserve(0, 1, kT0 + absl::Seconds(5));  // the clock started at the first push
  EXPECT_FALSE(t.StallDue(kT0 + after, after)) << "exactly `after` is not yet a stall";
  auto due = t.StallDue(kT0 + absl::Seconds(11), after);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(*due, absl::Seconds(11));
  EXPECT_FALSE(t.StallDue(kT0 + absl::Seconds(12), after)) << "reported within the period";
  EXPECT_FALSE(t.StallDue(kT0 + absl::Seconds(20), after));
  due = t.StallDue(kT0 + absl::Seconds(21), after);
  ASSERT_TRUE(due.has_value());
  EXPECT_EQ(*due, absl::Seconds(21));

  t.StopClock();
  EXPECT_FALSE(t.StallDue(kT0 + absl::Hours(1), after));
  // A reserve after StopClock starts a fresh clock; Release keeps it running.
  t.NextStep(/*step=*/0, absl::UnixEpoch());
  t.Reserve(0, 0, kT0 + absl::Seconds(100));
  t.Release(0, 0);
  EXPECT_TRUE(t.StallDue(kT0 + absl::Seconds(111), after).has_value());
  t.NextStep(/*step=*/0, absl::UnixEpoch());
  EXPECT_FALSE(t.StallDue(kT0 + absl::Hours(1), after));
}

TEST(PushTrackerTest, DescribesWhatTheStepWaitsFor) {
  PushTracker t(4, 3);
  // Rank 0 pushed everything; rank 1 has bucket 2 in flight and pushed 3;
  // rank 2 pushed nothing.
  for (int b = 0; b < 4; ++b) {
    t.Reserve(b, 0, kT0);
    t.Receive(b, 0);
  }
  t.Reserve(2, 1, kT0);
  t.Reserve(3, 1, kT0);
  t.Receive(3, 1);
  PushTracker::Waiting w = t.DescribeWaiting({});
  EXPECT_EQ(w.pushes,
            (std::vector<std::string>{"rank 1 (buckets 0-1 of 4)", "rank 2 (buckets 0-3 of 4)"}));
  EXPECT_EQ(w.receives, (std::vector<std::string>{"rank 1 (bucket 2 of 4)"}));
  // Registry ranks where known (worker_ids may be shorter than the world).
  w = t.DescribeWaiting({7, 5});
  EXPECT_EQ(w.pushes, (std::vector<std::string>{"rank 1 (registry rank 5; buckets 0-1 of 4)",
                                                "rank 2 (buckets 0-3 of 4)"}));
  EXPECT_EQ(w.receives, (std::vector<std::string>{"rank 1 (registry rank 5; bucket 2 of 4)"}));
}

TEST(PushTrackerTest, DescribeBucketsJoinsRuns) {
  EXPECT_EQ(DescribeBuckets({2}, 4), "bucket 2 of 4");
  EXPECT_EQ(DescribeBuckets({0, 1, 2, 3}, 4), "buckets 0-3 of 4");
  EXPECT_EQ(DescribeBuckets({0, 1, 2, 5, 7, 8, 9}, 12), "buckets 0-2, 5, 7-9 of 12");
  EXPECT_EQ(DescribeBuckets({1, 3}, 4), "buckets 1, 3 of 4");
}

TEST(PushTrackerTest, ReservesAreTheFlightRecordersArrivals) {
  PushTracker t(/*num_buckets=*/2, /*world=*/2);
  t.Reserve(0, 1, kT0);
  t.Reserve(1, 1, kT0 + absl::Milliseconds(2));
  t.Reserve(0, 0, kT0 + absl::Milliseconds(5));
  t.Release(0, 0);  // failed: the step goes on, its arrival stays
  t.Reserve(0, 0, kT0 + absl::Milliseconds(6));
  t.Reserve(1, 0, kT0 + absl::Milliseconds(7));
  for (int b = 0; b < 2; ++b) {
    for (int r = 0; r < 2; ++r) t.Receive(b, r);
  }
  t.NextStep(/*step=*/3, kT0 + absl::Milliseconds(9));
  const std::vector<StepArrivals> w = t.flight().Window();
  ASSERT_EQ(w.size(), 1u);
  const int64_t t0 = absl::ToUnixMicros(kT0);
  EXPECT_EQ(w[0].step, 3);
  EXPECT_EQ(w[0].end_us, t0 + 9000);
  EXPECT_EQ(w[0].first_push_us, (std::vector<int64_t>{t0 + 5000, t0}));
  EXPECT_EQ(w[0].last_push_us, (std::vector<int64_t>{t0 + 7000, t0 + 2000}));
  // A step abandoned (StopClock: a restore) leaves no arrivals behind.
  t.Reserve(0, 0, kT0 + absl::Seconds(1));
  t.Release(0, 0);
  t.StopClock();
  EXPECT_EQ(t.flight().Window().size(), 1u);
}

}  // namespace
}  // namespace tessel
