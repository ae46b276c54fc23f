// FlightRecorder: first and last push per rank, the ring's order and
// bound, the step in progress, Discard, pull times and bytes per rank.
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

TEST(FlightRecorderTest, PullsAskedInFlightAndServedAfterTheStepEndedLandInItsRecord) {
  FlightRecorder rec(/*world=*/2);
  rec.Pushed(0, 10);
  rec.PullAsked(0, /*step=*/4, /*in_progress=*/true, 12);  // pipelined: before the step ends
  rec.PullAsked(0, 4, true, 13);                           // a second pull: the first kept
  rec.PullServed(0, 4, true, 14);                          // an early bucket
  rec.Pushed(1, 20);
  rec.EndStep(/*step=*/4, /*now_us=*/30);
  rec.PullServed(0, 4, /*in_progress=*/false, 31);  // the rest, as the version reached 5
  rec.PullAsked(1, 4, false, 40);                   // rank 1 asks once the step ended
  rec.PullServed(1, 4, false, 41);
  std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].step, 4);
  EXPECT_EQ(w[0].pull_asked_us, (std::vector<int64_t>{12, 40}));
  EXPECT_EQ(w[0].pull_served_us, (std::vector<int64_t>{31, 41}));
}

TEST(FlightRecorderTest, APullOfAStepNoLongerKeptIsNotRecorded) {
  FlightRecorder rec(/*world=*/1, /*steps=*/2);
  for (int64_t s = 0; s < 4; ++s) {
    rec.Pushed(0, s * 10);
    rec.EndStep(s, s * 10 + 5);
  }
  rec.PullAsked(0, /*step=*/1, /*in_progress=*/false, 100);   // gone from the ring
  rec.PullServed(0, /*step=*/9, /*in_progress=*/false, 101);  // never there
  rec.PullAsked(0, /*step=*/-1, /*in_progress=*/false, 102);  // the first pull (version 0)
  std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 2u) << "no step in progress appears";
  for (const StepArrivals& s : w) {
    EXPECT_EQ(s.pull_asked_us, (std::vector<int64_t>{-1}));
    EXPECT_EQ(s.pull_served_us, (std::vector<int64_t>{-1}));
  }
  rec.PullAsked(0, /*step=*/2, false, 103);  // the older of the two kept
  EXPECT_EQ(rec.Window()[0].pull_asked_us, (std::vector<int64_t>{103}));
}

TEST(FlightRecorderTest, APullAloneShowsTheStepInProgressAndTheRingSlotComesBackClean) {
  FlightRecorder rec(/*world=*/2, /*steps=*/1);
  rec.PullAsked(1, /*step=*/0, /*in_progress=*/true, 5);
  std::vector<StepArrivals> w = rec.Window();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].end_us, -1);
  EXPECT_EQ(w[0].pull_asked_us, (std::vector<int64_t>{-1, 5}));
  rec.EndStep(0, 6);
  rec.Pushed(0, 7);
  rec.EndStep(1, 8);  // the ring of one: step 0's record comes back as the current
  rec.Pushed(1, 9);
  w = rec.Window();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].pull_asked_us, (std::vector<int64_t>{-1, -1})) << "a reused record is cleared";
  rec.Discard();
  EXPECT_EQ(rec.Window().size(), 1u);
}

TEST(FlightRecorderTest, CountsEachRanksBytes) {
  FlightRecorder rec(/*world=*/3);
  rec.CountBytes(2, 100, 0);
  rec.CountBytes(2, 50, 0);
  rec.CountBytes(0, 0, 400);
  EXPECT_EQ(rec.pushed_bytes(), (std::vector<int64_t>{0, 0, 150}));
  EXPECT_EQ(rec.pulled_bytes(), (std::vector<int64_t>{400, 0, 0}));
}

}  // namespace
}  // namespace tessel
