// WorkerMetrics as a scrape of the process's registry shows them: steps,
// their phases, recoveries with the steps they rolled back, and
// unauthenticated frames counted once each however often they are reported.
#include "worker/internal/worker_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/metrics.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(WorkerMetricsTest, AScrapeShowsStepsPhasesRecoveriesAndDroppedFrames) {
  WorkerMetrics m("metrics-job", 3);
  const std::string labels = "{job=\"metrics-job\",rank=\"3\"}";
  StepPhases phases;
  phases.push_ns = 1000000;
  phases.wait_ns = 2000000;
  phases.pull_ns = 3000000;
  m.StepDone(1, phases, 0);
  m.StepDone(2, phases, 0.5);
  m.Recovered(1.5, /*from=*/9, /*to=*/5);
  m.Recovered(0.1, /*from=*/5, /*to=*/5);  // nothing rolled back
  m.Unauthenticated(4);
  m.Unauthenticated(4);  // the same total again: nothing new
  m.Unauthenticated(6);

  const std::string text = metrics::Default().Expose();
  EXPECT_THAT(text, HasSubstr("tessel_worker_step" + labels + " 2\n"));
  // The first step has no previous end to measure from.
  EXPECT_THAT(text, HasSubstr("tessel_worker_step_seconds_count" + labels + " 1\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_step_phase_seconds_count{job=\"metrics-job\","
                              "rank=\"3\",phase=\"push\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_step_phase_seconds_count{job=\"metrics-job\","
                              "rank=\"3\",phase=\"update\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_recoveries_total" + labels + " 2\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_recovery_seconds_count" + labels + " 2\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_rolled_back_steps_total" + labels + " 4\n"));
  EXPECT_THAT(text, HasSubstr("tessel_worker_unauthenticated_frames_total" + labels + " 6\n"));
  EXPECT_THAT(text, Not(HasSubstr("rank=\"4\"")));
}

}  // namespace
}  // namespace tessel::internal
