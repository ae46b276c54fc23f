// ShardJob::ReadState / WriteState: staged chunks applied all at once by the
// commit, every bad request refused with nothing changed.
#include <cstring>

#include "gtest/gtest.h"
#include "server/shard_job.h"
#include "server/shard_job_proto.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

v1::JobSpec Spec(v1::Strategy strategy = v1::STRATEGY_ZERO2) {
  v1::JobSpec spec = OneTensorSpec("state", strategy, 2, 40, 16);
  *spec.mutable_optimizer() = TestAdam(1e-3);
  return spec;
}

std::string Floats(int n, float base) {
  std::string out(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float v = base + static_cast<float>(i);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

v1::WriteStateRequest Chunk(int64_t step, int64_t offset, int n, bool commit) {
  v1::WriteStateRequest req;
  req.set_job("state");
  req.set_step(step);
  req.set_offset(offset);
  req.set_params(Floats(n, 1000.f + static_cast<float>(offset)));
  req.set_state(Floats(n, 2000.f + static_cast<float>(offset)) +
                Floats(n, 3000.f + static_cast<float>(offset)));
  req.set_commit(commit);
  return req;
}

TEST(ShardJobStateTest, StagedChunksCommitTogetherAndReadBack) {
  auto job = ShardJob::Create(Spec(), 0, 0);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WriteShardState(**job, Chunk(7, 0, 25, false)).ok());
  EXPECT_EQ((*job)->version(), 0) << "nothing applied before the commit";
  auto done = WriteShardState(**job, Chunk(7, 25, 15, true));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->step(), 7);
  v1::ReadStateRequest read;
  read.set_job("state");
  read.set_step(7);
  read.set_offset(20);
  read.set_count(10);
  auto st = ReadShardState(**job, read);
  ASSERT_TRUE(st.ok()) << st.status();
  float p[10], m[10], v[10];
  std::memcpy(p, st->params().data(), 40);
  std::memcpy(m, st->state().data(), 40);
  std::memcpy(v, st->state().data() + 40, 40);
  EXPECT_EQ(p[0], 1020.f);  // offset 20 came from the first chunk (base 1000 + 20)
  EXPECT_EQ(p[5], 1025.f);  // offset 25: second chunk, base 1025 + 0
  EXPECT_EQ(m[9], 2029.f);  // offset 29: second chunk, 2025 + 4
  EXPECT_EQ(v[9], 3029.f);
}

TEST(ShardJobStateTest, BadRequestsChangeNothing) {
  auto job = ShardJob::Create(Spec(), 0, 0);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WriteShardState(**job, Chunk(3, 0, 40, true)).ok());
  const std::string digest = (*job)->Stats().state_digest;
  // Incomplete staging, then commit.
  ASSERT_TRUE(WriteShardState(**job, Chunk(9, 0, 10, false)).ok());
  auto r = WriteShardState(**job, Chunk(9, 10, 10, true));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ((*job)->Stats().state_digest, digest);
  // Sizes that do not fit: past the range, state of the wrong length.
  EXPECT_EQ(WriteShardState(**job, Chunk(9, 35, 10, true)).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::WriteStateRequest bad = Chunk(9, 0, 40, true);
  bad.mutable_state()->pop_back();
  EXPECT_EQ(WriteShardState(**job, bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Chunk(-1, 0, 40, true);
  EXPECT_EQ(WriteShardState(**job, bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*job)->Stats().state_digest, digest);
  EXPECT_EQ((*job)->version(), 3);
  // Reads of another step or outside the range are refused.
  v1::ReadStateRequest read;
  read.set_job("state");
  read.set_step(2);
  read.set_count(1);
  EXPECT_EQ(ReadShardState(**job, read).status().code(), absl::StatusCode::kFailedPrecondition);
  read.set_step(3);
  read.set_offset(39);
  read.set_count(2);
  EXPECT_EQ(ReadShardState(**job, read).status().code(), absl::StatusCode::kInvalidArgument);
}

// Fencing: a reader or writer of another epoch (a zombie from before a
// recovery) is refused, and what it staged is dropped.
TEST(ShardJobStateTest, ReadsAndWritesOfAnotherEpochAreRefused) {
  auto job = ShardJob::Create(Spec(), 0, /*epoch=*/5);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(WriteShardState(**job, Chunk(3, 0, 40, true)).ok());  // epoch 0: unchecked
  const std::string digest = (*job)->Stats().state_digest;
  v1::WriteStateRequest staged = Chunk(4, 0, 20, false);
  staged.set_epoch(5);
  ASSERT_TRUE(WriteShardState(**job, staged).ok());
  v1::WriteStateRequest zombie = Chunk(4, 20, 20, true);
  zombie.set_epoch(4);
  auto r = WriteShardState(**job, zombie);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("epoch 4 but the job is at epoch 5"), std::string::npos)
      << r.status();
  // The current epoch's commit now lacks the dropped first half.
  v1::WriteStateRequest rest = Chunk(4, 20, 20, true);
  rest.set_epoch(5);
  EXPECT_EQ(WriteShardState(**job, rest).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*job)->Stats().state_digest, digest);
  EXPECT_EQ((*job)->version(), 3);
  v1::ReadStateRequest read;
  read.set_job("state");
  read.set_step(3);
  read.set_count(1);
  read.set_epoch(6);
  EXPECT_EQ(ReadShardState(**job, read).status().code(), absl::StatusCode::kFailedPrecondition);
  read.set_epoch(5);
  EXPECT_TRUE(ReadShardState(**job, read).ok());
}

TEST(ShardJobStateTest, DdpShardsOnlyMoveTheirStep) {
  auto job = ShardJob::Create(Spec(v1::STRATEGY_DDP), 0, 0);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(WriteShardState(**job, Chunk(4, 0, 40, true)).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::WriteStateRequest commit;
  commit.set_job("state");
  commit.set_step(4);
  commit.set_commit(true);
  ASSERT_TRUE(WriteShardState(**job, commit).ok());
  EXPECT_EQ((*job)->version(), 4);
  v1::ReadStateRequest read;
  read.set_step(4);
  EXPECT_EQ(ReadShardState(**job, read).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessel
