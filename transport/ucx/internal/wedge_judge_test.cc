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

// A probe that left, two passes over the worker after it, and what moved
// meanwhile: the verdict and the late probes counted as the queue moving.
struct Case {
  const char* path;  // the probe's transport
  bool delivered;    // a message came the probe's way
  bool worked;       // the passes did work
  bool wedged;
};

TEST(WedgeJudgeTest, WedgedOnlyWhenNothingMovedTheProbesWay) {
  for (const Case& c : {
           // Work on shared memory is not the probed FIFO moving.
           Case{"posix", false, true, true},
           Case{"posix", true, false, false},
           Case{"sysv", false, false, true},
           // Over tcp any work is movement (a large payload on its way).
           Case{"tcp", false, true, false},
           Case{"tcp", false, false, true},
       }) {
    WedgeJudge j;
    j.SetProbePath({c.path});
    const uint64_t before = j.Movement();
    j.ProbeSent();
    if (c.delivered) j.Delivered();
    j.Pass(c.worked);
    j.Pass(false);
    const absl::Status verdict = j.Judge(kLate, true, before, absl::Seconds(1));
    EXPECT_EQ(!verdict.ok(), c.wedged)
        << c.path << " delivered=" << c.delivered << " worked=" << c.worked;
    EXPECT_EQ(j.late_moving(), c.wedged ? 0u : 1u);
    EXPECT_EQ(j.late_starved(), 0u);
  }
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
