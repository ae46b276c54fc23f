// WedgeJudge's verdicts from the evidence alone: no UCX, the progress
// thread's calls made by the test.
#include "transport/ucx/internal/wedge_judge.h"

#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

const absl::Status kLate = absl::FailedPreconditionError("receive queue wedged");

TEST(WedgeJudgeTest, ProbePathIsSharedTransports) {
  WedgeJudge j;
  j.SetProbePath({"posix"});
  EXPECT_TRUE(j.OnProbePath({"self", "posix"}));
  EXPECT_FALSE(j.OnProbePath({"tcp"}));
  EXPECT_FALSE(j.OnProbePath({}));
}

TEST(WedgeJudgeTest, ChancesAreTwoPassesAfterTheProbeLeft) {
  WedgeJudge j;
  j.Pass(false);
  j.ProbeSent();
  EXPECT_FALSE(j.HadChances(true));
  j.Pass(false);
  EXPECT_FALSE(j.HadChances(true));
  j.Pass(false);
  EXPECT_TRUE(j.HadChances(true));
  EXPECT_FALSE(j.HadChances(false)) << "a probe not sent yet has had no chance";
}

TEST(WedgeJudgeTest, AQuietSharedMemoryQueueIsWedgedEvenWhileTheWorkerWorks) {
  WedgeJudge j;
  j.SetProbePath({"posix"});
  const uint64_t before = j.Movement();
  j.ProbeSent();
  j.Pass(true);  // work on shared memory is not the probed FIFO moving
  j.Pass(true);
  EXPECT_EQ(j.Judge(kLate, true, before, absl::Seconds(1)).code(), kLate.code());
  EXPECT_EQ(j.late_starved() + j.late_moving(), 0u);
}

TEST(WedgeJudgeTest, DeliveriesOnThePathMeanLoad) {
  WedgeJudge j;
  j.SetProbePath({"posix"});
  const uint64_t before = j.Movement();
  j.ProbeSent();
  j.Delivered();
  j.Pass(false);
  j.Pass(false);
  EXPECT_TRUE(j.Judge(kLate, true, before, absl::Seconds(1)).ok());
  EXPECT_EQ(j.late_moving(), 1u);
}

TEST(WedgeJudgeTest, OverTcpAnyWorkIsMovement) {
  WedgeJudge j;
  j.SetProbePath({"tcp"});
  const uint64_t before = j.Movement();
  j.ProbeSent();
  j.Pass(true);
  j.Pass(false);
  EXPECT_TRUE(j.Judge(kLate, true, before, absl::Seconds(1)).ok());
  EXPECT_EQ(j.late_moving(), 1u);
}

TEST(WedgeJudgeTest, AStarvedThreadOrALateArrivalIsLoad) {
  WedgeJudge j;
  j.SetProbePath({"sysv"});
  uint64_t before = j.Movement();
  j.ProbeSent();
  j.Pass(false);  // one pass only: no chance yet
  EXPECT_TRUE(j.Judge(kLate, true, before, absl::Seconds(1)).ok());
  EXPECT_EQ(j.late_starved(), 1u);
  before = j.Movement();
  j.ProbeSent();
  j.Pass(false);
  j.Pass(false);
  EXPECT_TRUE(j.Judge(absl::OkStatus(), true, before, absl::Seconds(1)).ok());  // it arrived
  EXPECT_EQ(j.late_moving(), 1u);
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
