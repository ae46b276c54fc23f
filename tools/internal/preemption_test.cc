#include "tools/internal/preemption.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

// A worker's step and checkpoint requests as Preemption sees them.
struct FakeWorker {
  int64_t step = 10;
  int requests = 0;
  absl::Status answer;  // what RequestCheckpoint says
  int AfterStep(Preemption& p) {
    return p.AfterStep(step, /*rank=*/1, [this] {
      ++requests;
      return answer;
    });
  }
};

TEST(PreemptionTest, GoesOnWithoutSigterm) {
  Preemption p([] { return false; });
  FakeWorker w;
  EXPECT_EQ(w.AfterStep(p), -1);
  EXPECT_EQ(p.AfterFailedStep(w.step, 1), -1);
  EXPECT_EQ(w.requests, 0);
}

TEST(PreemptionTest, AsksOnceForACheckpointRunsOneMoreStepThenLeaves) {
  bool terminated = false;
  Preemption p([&] { return terminated; });
  FakeWorker w;
  EXPECT_EQ(w.AfterStep(p), -1);
  terminated = true;
  EXPECT_EQ(w.AfterStep(p), -1);  // asks for step 11 and goes on
  EXPECT_EQ(w.requests, 1);
  EXPECT_EQ(w.AfterStep(p), -1);  // still at step 10 (a recovery went back)
  EXPECT_EQ(w.requests, 1);
  w.step = 11;
  EXPECT_EQ(w.AfterStep(p), kTerminatedExit);
  EXPECT_EQ(w.requests, 1);
}

TEST(PreemptionTest, LeavesAtOnceWhenNoCheckpointCanBeHad) {
  Preemption p([] { return true; });
  FakeWorker w;
  w.answer = absl::FailedPreconditionError("DDP keeps its state on the workers");
  EXPECT_EQ(w.AfterStep(p), kTerminatedExit);
  EXPECT_EQ(w.requests, 1);
}

TEST(PreemptionTest, AFailedStepAfterSigtermLeavesAtOnce) {
  Preemption p([] { return true; });
  EXPECT_EQ(p.AfterFailedStep(10, 1), kTerminatedExit);
}

}  // namespace
}  // namespace tessel
