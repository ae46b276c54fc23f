#include "server/step_hold.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

GradNormStats Stats(double sq) {
  GradNormStats s;
  s.sum_sq = sq;
  s.sum_abs = sq;
  s.max_abs = sq;
  return s;
}

TEST(StepHoldTest, AStepNotHeldUpdatesEachBucketAtOnce) {
  StepHold hold("j: ", 2);
  ASSERT_TRUE(hold.OnPush(false).ok());
  EXPECT_FALSE(hold.held());
  EXPECT_EQ(hold.Begin(0), StepHold::Action::kUpdate);
  EXPECT_FALSE(hold.multiplier().has_value());
  EXPECT_FALSE(hold.AskNorm(0).ok()) << "not held: no norm";
  EXPECT_FALSE(hold.Release(0, 0).ok());
}

TEST(StepHoldTest, AHeldStepIsMeasuredThenAppliedWhenReleased) {
  StepHold hold("j: ", 3);
  ASSERT_TRUE(hold.OnPush(true).ok());
  bool all = false;
  EXPECT_EQ(hold.Begin(2), StepHold::Action::kReduce);
  EXPECT_FALSE(hold.Reduced(2, Stats(4), &all));
  EXPECT_FALSE(all);
  absl::StatusOr<std::optional<GradNormStats>> early = hold.AskNorm(0);
  ASSERT_TRUE(early.ok());
  EXPECT_FALSE(early->has_value()) << "waits for every bucket";
  EXPECT_EQ(hold.Begin(0), StepHold::Action::kReduce);
  EXPECT_FALSE(hold.Reduced(0, Stats(1), &all));
  EXPECT_EQ(hold.Begin(1), StepHold::Action::kReduce);
  EXPECT_FALSE(hold.Reduced(1, Stats(2), &all));
  EXPECT_TRUE(all);
  absl::StatusOr<std::optional<GradNormStats>> norm = hold.AskNorm(0);
  ASSERT_TRUE(norm.ok() && norm->has_value());
  EXPECT_EQ((*norm)->sum_sq, 7);
  EXPECT_EQ((*norm)->max_abs, 4);
  EXPECT_NE(hold.Waiting().find("RELEASE"), std::string::npos);
  absl::StatusOr<std::vector<int>> apply = hold.Release(0, 0x3e800000u);  // 0.25f
  ASSERT_TRUE(apply.ok());
  EXPECT_EQ(*apply, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hold.Begin(1), StepHold::Action::kApply);
  EXPECT_EQ(hold.Waiting(), "");
  // Every other rank's release says the same: nothing more to apply.
  apply = hold.Release(0, 0x3e800000u);
  ASSERT_TRUE(apply.ok());
  EXPECT_TRUE(apply->empty());
  EXPECT_FALSE(hold.Release(0, 0x3f000000u).ok()) << "ranks that disagree";
  hold.EndStep();
  EXPECT_EQ(hold.step(), 1);
  EXPECT_TRUE(hold.Release(0, 0x3e800000u).ok()) << "a slower rank's release of the step ended";
  EXPECT_FALSE(hold.Release(0, 0x3f000000u).ok());
  absl::StatusOr<std::optional<GradNormStats>> late = hold.AskNorm(0);
  ASSERT_TRUE(late.ok() && late->has_value()) << "a slower rank's ask of the step just applied";
  EXPECT_EQ((*late)->sum_sq, 7);
  hold.EndStep();
  EXPECT_FALSE(hold.AskNorm(0).ok()) << "two steps on: its norm is gone";
  EXPECT_FALSE(hold.held()) << "the next step starts undecided";
}

TEST(StepHoldTest, BucketsCompletingAfterTheReleaseUpdateAtOnceWithItsMultiplier) {
  StepHold hold("j: ", 2);
  ASSERT_TRUE(hold.OnPush(true).ok());
  bool all = false;
  EXPECT_EQ(hold.Begin(0), StepHold::Action::kReduce);
  // A release that does not clip comes before bucket 0's reduction ends.
  absl::StatusOr<std::vector<int>> apply = hold.Release(0, 0);
  ASSERT_TRUE(apply.ok());
  EXPECT_TRUE(apply->empty()) << "bucket 0 is still being reduced";
  EXPECT_TRUE(hold.Reduced(0, Stats(1), &all)) << "applied by the thread that reduced it";
  EXPECT_EQ(hold.Begin(1), StepHold::Action::kUpdate);
  ASSERT_TRUE(hold.multiplier().has_value());
  EXPECT_EQ(*hold.multiplier(), 0u);
  EXPECT_FALSE(hold.AskNorm(0).ok()) << "released before every bucket was measured";
}

TEST(StepHoldTest, AReleaseBeforeThePushesIsKeptForTheStep) {
  StepHold hold("j: ", 1);
  ASSERT_TRUE(hold.Release(0, 0x3f000000u).ok());
  ASSERT_TRUE(hold.OnPush(true).ok());
  EXPECT_EQ(hold.Begin(0), StepHold::Action::kUpdate);
  EXPECT_EQ(*hold.multiplier(), 0x3f000000u);
}

TEST(StepHoldTest, RanksThatDisagreeAreRefusedAndChangeNothing) {
  StepHold hold("j: ", 1);
  ASSERT_TRUE(hold.OnPush(true).ok());
  absl::Status s = hold.OnPush(false);
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_NE(s.message().find("every rank must clip the same steps"), std::string::npos);
  EXPECT_TRUE(hold.held());
  EXPECT_FALSE(hold.Release(3, 0).ok()) << "a step not begun";
  EXPECT_FALSE(hold.AskNorm(3).ok());
  EXPECT_FALSE(hold.multiplier().has_value());
}

TEST(StepHoldTest, ResetForgetsTheStep) {
  StepHold hold("j: ", 1);
  ASSERT_TRUE(hold.OnPush(true).ok());
  ASSERT_TRUE(hold.Release(0, 0).ok());
  hold.Reset(40);
  EXPECT_EQ(hold.step(), 40);
  EXPECT_FALSE(hold.held());
  EXPECT_FALSE(hold.multiplier().has_value());
  EXPECT_FALSE(hold.Release(0, 0).ok());
}

}  // namespace
}  // namespace tessel
