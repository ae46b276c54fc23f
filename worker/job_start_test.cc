// The job start rules: which starts and resumes a worker refuses before it
// sends anything, and which CreateJob answers it accepts; a refusal leaves
// the job's step as it was.
#include "worker/job_start.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

JobStart Fresh(bool ddp, int rank, size_t init_floats) {
  JobStart s;
  s.where = "job 'j' rank " + std::to_string(rank);
  s.ddp = ddp;
  s.rank = rank;
  s.init_floats = init_floats;
  s.num_params = 10;
  return s;
}

TEST(JobStartTest, AFreshStartNeedsAFullInitOnTheRanksThatSeed) {
  EXPECT_TRUE(CheckJobStart(Fresh(false, 0, 10)).ok());
  const absl::Status short_init = CheckJobStart(Fresh(false, 0, 9));
  EXPECT_TRUE(absl::IsInvalidArgument(short_init)) << short_init;
  EXPECT_EQ(short_init.message(), "job 'j' rank 0: init has 9 floats but the layout has 10");
  EXPECT_TRUE(CheckJobStart(Fresh(false, 1, 0)).ok()) << "rank 1 of a ZeRO job pulls";
  EXPECT_TRUE(absl::IsInvalidArgument(CheckJobStart(Fresh(true, 1, 0))))
      << "every DDP rank holds the parameters";
  JobStart resumed = Fresh(false, 0, 0);
  resumed.resume = true;
  EXPECT_TRUE(CheckJobStart(resumed).ok()) << "a resume takes the servers' state";
}

TEST(JobStartTest, ADdpResumeNeedsRecovery) {
  JobStart s = Fresh(true, 1, 10);
  s.resume = true;
  const absl::Status refused = CheckJobStart(s);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("--recover"));
  s.recovery = true;
  s.init_floats = 0;  // the recovery copies the surviving workers' state
  EXPECT_TRUE(CheckJobStart(s).ok());
}

TEST(JobStartTest, AResumeTakesShardZerosStepAndRefusesOthers) {
  int64_t step = -1;
  ASSERT_TRUE(CheckCreatedShard("w", /*resume=*/true, false, 0, 40, &step).ok());
  EXPECT_EQ(step, 40);
  EXPECT_TRUE(CheckCreatedShard("w", true, false, 1, 40, &step).ok());
  const absl::Status apart = CheckCreatedShard("w", true, false, 2, 30, &step);
  EXPECT_TRUE(absl::IsFailedPrecondition(apart)) << apart;
  EXPECT_EQ(apart.message(),
            "w: shards resumed at different steps (shard 0 at 40, shard 2 at 30); restart the "
            "servers and resume again");
  EXPECT_EQ(step, 40) << "a refusal changes no state";
}

TEST(JobStartTest, AFreshStartRefusesAJobUnderWay) {
  int64_t step = 0;
  EXPECT_TRUE(CheckCreatedShard("w", /*resume=*/false, false, 0, 0, &step).ok());
  const absl::Status exists = CheckCreatedShard("w", false, /*ddp=*/false, 1, 7, &step);
  EXPECT_TRUE(absl::IsFailedPrecondition(exists)) << exists;
  EXPECT_THAT(exists.message(), HasSubstr("job already exists at step 7 on shard 1"));
  EXPECT_EQ(step, 0);
  EXPECT_TRUE(CheckCreatedShard("w", false, /*ddp=*/true, 1, 7, &step).ok())
      << "the rule is for ZeRO/FSDP shards";
  EXPECT_EQ(step, 0);
}

}  // namespace
}  // namespace tessel
