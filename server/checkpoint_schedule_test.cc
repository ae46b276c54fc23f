// CheckpointSchedule: snapshots every N steps and at the steps asked for,
// each request once.
#include "server/checkpoint_schedule.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(CheckpointScheduleTest, EveryNStepsAndTheRequestedOnesOnce) {
  CheckpointSchedule s(10);
  EXPECT_FALSE(s.DueAt(9));
  EXPECT_TRUE(s.DueAt(10));
  EXPECT_TRUE(s.DueAt(20));
  s.Request(13);
  s.Request(13);
  s.Request(15);
  EXPECT_TRUE(s.DueAt(13));
  EXPECT_FALSE(s.DueAt(13)) << "a request is consumed";
  s.Cancel(15);
  EXPECT_FALSE(s.DueAt(15));
  s.Request(20);
  EXPECT_TRUE(s.DueAt(20));
}

TEST(CheckpointScheduleTest, ZeroMeansOnlyOnRequest) {
  CheckpointSchedule s(0);
  EXPECT_FALSE(s.DueAt(0));
  EXPECT_FALSE(s.DueAt(100));
  s.Request(100);
  EXPECT_TRUE(s.DueAt(100));
}

}  // namespace
}  // namespace tessel
