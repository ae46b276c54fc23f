// FlightRecorder: first and last push per rank, the ring's order and
// bound, the step in progress, and Discard.
#include "server/flight_recorder.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(FlightRecorderTest, KeepsEachRanksFirstAndLastPushOfAStep) {
  FlightRecorder rec(/*world=*/3);
  EXPECT_TRUE(rec.Window().empty());
  rec.Pushed(1, 100);
  rec.Pushed(0, 110);
  rec.Pushed(1, 130);
  rec.Pushed(1, 120);  // the last to arrive, whatever its bucket
  std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 1u) << "the step in progress";
  EXPECT_EQ(w[0].step, -1);
  EXPECT_EQ(w[0].end_us, -1);
  EXPECT_EQ(w[0].first_push_us, (std::vector<int64_t>{110, 100, -1}));
  EXPECT_EQ(w[0].last_push_us, (std::vector<int64_t>{110, 120, -1}));
  rec.Pushed(2, 140);
  rec.EndStep(/*step=*/7, /*now_us=*/150);
  w = rec.Window();
  ASSERT_EQ(w.size(), 1u) << "no push of the next step yet";
  EXPECT_EQ(w[0].step, 7);
  EXPECT_EQ(w[0].end_us, 150);
  EXPECT_EQ(w[0].last_push_us, (std::vector<int64_t>{110, 120, 140}));
}

TEST(FlightRecorderTest, TheRingKeepsTheNewestStepsOldestFirst) {
  FlightRecorder rec(/*world=*/2, /*steps=*/4);
  for (int64_t s = 0; s < 10; ++s) {
    rec.Pushed(0, s * 10);
    rec.Pushed(1, s * 10 + 1);
    rec.EndStep(s, s * 10 + 5);
  }
  rec.Pushed(1, 1000);
  const std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].step, 6 + i);
    EXPECT_EQ(w[i].first_push_us, (std::vector<int64_t>{(6 + i) * 10, (6 + i) * 10 + 1}));
  }
  EXPECT_EQ(w[4].last_push_us, (std::vector<int64_t>{-1, 1000}));
}

TEST(FlightRecorderTest, DiscardForgetsTheStepInProgressOnly) {
  FlightRecorder rec(/*world=*/2);
  rec.Pushed(0, 1);
  rec.EndStep(0, 2);
  rec.Pushed(1, 3);
  rec.Discard();
  std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].step, 0);
  rec.Pushed(0, 9);
  w = rec.Window();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].first_push_us, (std::vector<int64_t>{9, -1})) << "the discarded push is gone";
}

}  // namespace
}  // namespace tessel
