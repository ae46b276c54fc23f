// ShardJob::StallReport: a step in progress for too long names the ranks and
// buckets it waits for, once per period, and never once the step is done.
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kEpoch = 3;
const absl::Duration kAfter = absl::Seconds(10);

// World 2, one shard, 64 floats in buckets of 16: four buckets.
v1::JobSpec Spec(v1::Strategy strategy) {
  v1::JobSpec spec = OneTensorSpec("stall", strategy, 2, 64, 16);
  spec.mutable_optimizer()->Clear();
  spec.mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec.mutable_optimizer()->set_lr(0.1);
  return spec;
}

class StallTest : public ::testing::TestWithParam<v1::Strategy> {
 protected:
  void SetUp() override {
    auto created = ShardJob::Create(Spec(GetParam()), 0, kEpoch);
    ASSERT_TRUE(created.ok()) << created.status();
    job_ = std::move(*created);
    ASSERT_EQ(job_->layout().num_buckets(0), 4);
    if (GetParam() == v1::STRATEGY_DDP) return;  // DDP takes no INIT
    for (int b = 0; b < 4; ++b) {
      FrameHeader h = Header(FrameType::kInit, 0, b);
      ASSERT_TRUE(job_->AcceptData(h).ok());
      job_->CompleteReceive(h, absl::OkStatus());
    }
  }

  FrameHeader Header(FrameType type, int rank, int bucket) {
    return JobFrame(*job_, kEpoch, type, rank, bucket);
  }

  // Reserves a push; with `land`, its payload also arrives, and a bucket it
  // completes is updated (as the compute thread would).
  void Push(int rank, int bucket, bool land = true) {
    FrameHeader h = Header(FrameType::kPush, rank, bucket);
    ASSERT_TRUE(job_->AcceptData(h).ok()) << "rank " << rank << " bucket " << bucket;
    if (!land) return;
    ShardJob::Completion c = job_->CompleteReceive(h, absl::OkStatus());
    if (c.update) job_->UpdateBucket(*c.update);
  }

  void Pull(int rank) {
    FrameHeader h = Header(FrameType::kPull, rank, 0);
    h.step = job_->version() + 1;
    h.payload_bytes = 0;
    h.bucket_count = 4;
    ASSERT_TRUE(job_->AcceptPull(h, /*reply_to=*/rank).ok());
  }

  std::unique_ptr<ShardJob> job_;
};

TEST_P(StallTest, NamesTheRankThatDidNotPushAfterTheDeadlineOnly) {
  const absl::Time before = absl::Now();
  for (int b = 0; b < 4; ++b) Push(0, b);
  Pull(0);
  const absl::Time pushed = absl::Now();

  EXPECT_EQ(job_->StallReport(before + kAfter, kAfter), std::nullopt) << "not stalled yet";
  const absl::Time late = pushed + kAfter + absl::Milliseconds(1);
  std::optional<std::string> report = job_->StallReport(late, kAfter);
  ASSERT_TRUE(report.has_value());
  EXPECT_THAT(*report, HasSubstr("job 'stall' shard 0: step 0 (epoch 3) stalled for 10"));
  EXPECT_THAT(*report, HasSubstr("waiting for pushes from rank 1 (buckets 0-3 of 4)"));
  EXPECT_THAT(*report, Not(HasSubstr("rank 0 (")));
  EXPECT_THAT(*report, HasSubstr("pulls waiting for step 1: rank 0"));
  EXPECT_THAT(*report, Not(HasSubstr("\n")));

  // Once per period, however often the watcher asks.
  EXPECT_EQ(job_->StallReport(late + kAfter / 2, kAfter), std::nullopt);
  EXPECT_EQ(job_->StallReport(late + kAfter - absl::Milliseconds(1), kAfter), std::nullopt);
  EXPECT_TRUE(job_->StallReport(late + kAfter, kAfter).has_value());
}

TEST_P(StallTest, CondensesPartlyPushedBucketsAndNamesRegistryRanks) {
  job_->SetWorkerIds({4, 7});
  const absl::Time before = absl::Now();
  for (int b = 0; b < 4; ++b) Push(0, b);
  Push(1, 1);
  Push(1, 2, /*land=*/false);  // reserved, payload still on its way
  std::optional<std::string> report = job_->StallReport(before + 2 * kAfter, kAfter);
  ASSERT_TRUE(report.has_value());
  EXPECT_THAT(*report, HasSubstr("waiting for pushes from rank 1 (registry rank 7; "
                                 "buckets 0, 3 of 4); receives not finished from rank 1 "
                                 "(registry rank 7; bucket 2 of 4)"));
  EXPECT_THAT(*report, Not(HasSubstr("rank 0 (")));
  EXPECT_THAT(*report, Not(HasSubstr("pulls waiting")));
}

TEST_P(StallTest, NothingWhenNoStepIsInProgressOrItCompleted) {
  EXPECT_EQ(job_->StallReport(absl::Now() + 100 * kAfter, kAfter), std::nullopt) << "idle";

  const absl::Time before = absl::Now();
  for (int b = 0; b < 4; ++b) Push(0, b);
  ASSERT_TRUE(job_->StallReport(before + 2 * kAfter, kAfter).has_value());
  for (int b = 0; b < 4; ++b) Push(1, b);
  ASSERT_EQ(job_->version(), 1);
  EXPECT_EQ(job_->StallReport(before + 100 * kAfter, kAfter), std::nullopt) << "step done";

  // The next step has its own clock, and is reported at once when stalled:
  // the previous step's report does not hold it back.
  const absl::Time next = absl::Now();
  Push(1, 3);
  EXPECT_EQ(job_->StallReport(next + kAfter / 2, kAfter), std::nullopt);
  std::optional<std::string> report = job_->StallReport(absl::Now() + 2 * kAfter, kAfter);
  ASSERT_TRUE(report.has_value());
  EXPECT_THAT(*report, HasSubstr("step 1 (epoch 3)"));
  EXPECT_THAT(*report, HasSubstr("rank 0 (buckets 0-3 of 4), rank 1 (buckets 0-2 of 4)"));
}

TEST_P(StallTest, AWithdrawnOnlyPushStopsTheClock) {
  FrameHeader h = Header(FrameType::kPush, 1, 2);
  ASSERT_TRUE(job_->AcceptData(h).ok());
  job_->CompleteReceive(h, absl::UnavailableError("receive failed"));
  EXPECT_EQ(job_->StallReport(absl::Now() + 2 * kAfter, kAfter), std::nullopt);
}

INSTANTIATE_TEST_SUITE_P(Strategies, StallTest,
                         ::testing::Values(v1::STRATEGY_ZERO2, v1::STRATEGY_DDP),
                         [](const ::testing::TestParamInfo<v1::Strategy>& info) {
                           return info.param == v1::STRATEGY_DDP ? "Ddp" : "Zero2";
                         });

}  // namespace
}  // namespace tessel
