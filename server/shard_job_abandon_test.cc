// ShardJob::AbandonReceives (issue 44): when a rank's process is replaced,
// the receives it left unfinished are abandoned. Their slots are owed again
// (Stats().waiting), the replacement's pushes complete the step with the
// bits a job that never saw the dead process has, and a late completion of
// an abandoned receive (success or failure, before or after the step ends)
// is ignored: it completes, releases and counts nothing, and the bytes it
// wrote are never read.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 3;
constexpr int kWorld = 2;
constexpr int64_t kElements = 32, kBucket = 16;  // two buckets

class AbandonTest : public ::testing::TestWithParam<v1::Strategy> {
 protected:
  AbandonTest()
      : job_(InitializedJob(OneTensorSpec("ab", GetParam(), kWorld, kElements, kBucket), kEpoch)),
        reference_(
            InitializedJob(OneTensorSpec("ab", GetParam(), kWorld, kElements, kBucket), kEpoch)) {}

  // Rank's push of `bucket` (TestValue(rank, i, salt)) to `job`, accepted
  // and landed; its update run if it completed the bucket.
  static void Push(ShardJob& job, int rank, int bucket, int salt) {
    FrameHeader h = JobFrame(job, kEpoch, FrameType::kPush, rank, bucket);
    uint64_t ticket = 0;
    absl::StatusOr<void*> dst = job.AcceptData(h, false, &ticket);
    ASSERT_TRUE(dst.ok()) << dst.status();
    ASSERT_NE(ticket, 0u);
    Fill(job, rank, bucket, salt, *dst);
    ShardJob::Completion c = job.CompleteReceive(h, absl::OkStatus(), ticket);
    ASSERT_FALSE(c.abandoned);
    if (c.update) job.UpdateBucket(*c.update);
  }
  static void Fill(ShardJob& job, int rank, int bucket, int salt, void* to) {
    const Range br = job.layout().bucket_range(0, bucket);
    float* f = static_cast<float*>(to);
    for (int64_t i = br.begin; i < br.end; ++i) f[i - br.begin] = TestValue(rank, i, salt);
  }
  // The whole step on the reference job, which never saw the dead process.
  void ReferenceStep(int salt) {
    for (int b = 0; b < 2; ++b) {
      for (int r = 0; r < kWorld; ++r) Push(*reference_, r, b, salt);
    }
  }

  std::unique_ptr<ShardJob> job_, reference_;
};

TEST_P(AbandonTest, AReplacedRanksReceivesAreOwedAgainAndTheirLateCompletionsChangeNothing) {
  ASSERT_TRUE(job_ && reference_);
  Push(*job_, 0, 0, 1);
  Push(*job_, 0, 1, 1);
  // Rank 1's process dies with its push of bucket 0 on the way.
  const FrameHeader h0 = JobFrame(*job_, kEpoch, FrameType::kPush, 1, 0);
  uint64_t dying = 0;
  absl::StatusOr<void*> dying_at = job_->AcceptData(h0, false, &dying);
  ASSERT_TRUE(dying_at.ok());
  JobStats st = job_->Stats(false);
  ASSERT_EQ(st.waiting.size(), 1u);
  EXPECT_EQ(st.waiting[0].receiving, std::vector<int>{0});

  EXPECT_EQ(job_->AbandonReceives(0), 0) << "rank 0 has nothing unfinished";
  EXPECT_EQ(job_->AbandonReceives(kWorld), 0) << "not a rank of the job";
  EXPECT_EQ(job_->AbandonReceives(1), 1);
  st = job_->Stats(false);
  ASSERT_EQ(st.waiting.size(), 1u);
  EXPECT_EQ(st.waiting[0].slot, 1);
  EXPECT_EQ(st.waiting[0].not_pushed, (std::vector<int>{0, 1})) << "what the replacement owes";
  EXPECT_TRUE(st.waiting[0].receiving.empty());
  EXPECT_EQ(st.retired_buffer_bytes, kBucket * 4);
  EXPECT_EQ(job_->AbandonReceives(1), 0) << "once";

  // The replacement pushes bucket 0: another buffer, another ticket.
  uint64_t mine = 0;
  absl::StatusOr<void*> at = job_->AcceptData(h0, false, &mine);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_NE(*at, *dying_at);
  EXPECT_NE(mine, dying);
  Fill(*job_, 1, 0, 1, *at);
  // The dead process's transfer lands late, in its retired buffer, and
  // completes (or fails): ignored, the replacement's receive goes on.
  std::vector<float> stale(kBucket, 1000.f);
  std::memcpy(*dying_at, stale.data(), kBucket * 4);
  ShardJob::Completion late = job_->CompleteReceive(h0, absl::OkStatus(), dying);
  EXPECT_TRUE(late.abandoned);
  EXPECT_FALSE(late.update.has_value());
  late = job_->CompleteReceive(h0, absl::UnavailableError("peer died"), dying);
  EXPECT_TRUE(late.abandoned);
  st = job_->Stats(false);
  ASSERT_EQ(st.waiting.size(), 1u);
  EXPECT_EQ(st.waiting[0].receiving, std::vector<int>{0}) << "the replacement's, untouched";
  ShardJob::Completion c = job_->CompleteReceive(h0, absl::OkStatus(), mine);
  ASSERT_FALSE(c.abandoned);
  ASSERT_EQ(c.update, 0);
  job_->UpdateBucket(0);
  Push(*job_, 1, 1, 1);
  EXPECT_EQ(job_->version(), 1);
  ReferenceStep(1);
  ExpectBitwise(job_->ParamsSnapshot(), reference_->ParamsSnapshot());
  EXPECT_EQ(job_->Stats(false).counters.pushed_bytes, 4 * kBucket * 4) << "one push per slot";

  // Once the step ended, a late completion still changes nothing, and the
  // next step runs as the reference's.
  late = job_->CompleteReceive(h0, absl::OkStatus(), dying);
  EXPECT_TRUE(late.abandoned);
  EXPECT_EQ(job_->version(), 1);
  EXPECT_TRUE(job_->Stats(false).waiting.empty());
  for (int b = 0; b < 2; ++b) {
    for (int r = kWorld - 1; r >= 0; --r) Push(*job_, r, b, 2);
  }
  ReferenceStep(2);
  EXPECT_EQ(job_->version(), 2);
  ExpectBitwise(job_->ParamsSnapshot(), reference_->ParamsSnapshot());
  st = job_->Stats(false);
  EXPECT_EQ(st.abandoned_completions, 3);
  EXPECT_EQ(st.retired_buffer_bytes, kBucket * 4) << "never back in the pool";
}

TEST_P(AbandonTest, ABorrowedPushAbandonedBeforeItLandsIsReleasedUnread) {
  ASSERT_TRUE(job_);
  const FrameHeader h = JobFrame(*job_, kEpoch, FrameType::kPush, 1, 1);
  uint64_t ticket = 0;
  absl::StatusOr<void*> at = job_->AcceptData(h, /*borrow=*/true, &ticket);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, nullptr);
  EXPECT_EQ(job_->AbandonReceives(1), 1);
  EXPECT_EQ(job_->Stats(false).retired_buffer_bytes, 0) << "nothing of the shard's to retire";
  bool released = false;
  std::shared_ptr<void> lease(nullptr, [&](void*) { released = true; });
  std::vector<float> stale(kBucket, 1000.f);
  ShardJob::Completion c = job_->CompleteBorrowed(h, stale.data(), std::move(lease), ticket);
  EXPECT_TRUE(c.abandoned);
  EXPECT_TRUE(released) << "the worker's memory goes back at once";
  EXPECT_TRUE(job_->Stats(false).waiting.empty()) << "no step in progress: the clock stopped";
  for (int b = 0; b < 2; ++b) {
    for (int r = 0; r < kWorld; ++r) Push(*job_, r, b, 1);
  }
  ReferenceStep(1);
  ExpectBitwise(job_->ParamsSnapshot(), reference_->ParamsSnapshot());
}

INSTANTIATE_TEST_SUITE_P(Strategies, AbandonTest,
                         ::testing::Values(v1::STRATEGY_ZERO2, v1::STRATEGY_DDP),
                         [](const ::testing::TestParamInfo<v1::Strategy>& info) {
                           return info.param == v1::STRATEGY_DDP ? "Ddp" : "Zero2";
                         });

}  // namespace
}  // namespace tessel
