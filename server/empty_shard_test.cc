// A job smaller than one alignment unit per shard: 12 elements in units of 64
// on 3 shards, so shards 1 and 2 hold no element (core/layout.h). They take
// no part in the steps: optimizer settings for any step are taken there,
// checkpoint requests ask nothing of them, and shard 0 writes their parts,
// so its checkpoints complete and restore onto any shard count, as do the
// checkpoints written when the first shards were the empty ones.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "server/checkpointer.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kParams = 12;

v1::JobSpec TinySpec(int shards) {
  v1::JobSpec spec;
  spec.set_job("tiny");
  spec.set_strategy(v1::STRATEGY_ZERO2);
  spec.set_world_size(1);
  spec.set_num_shards(shards);
  spec.set_align_elems(64);
  spec.set_bucket_bytes(256);
  for (auto [name, n] : {std::pair<const char*, int64_t>{"bias", 11}, {"scale", 1}}) {
    v1::TensorSpec* t = spec.add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->set_dtype(v1::DTYPE_F32);
  }
  *spec.mutable_optimizer() = TestAdam();
  return spec;
}

class EmptyShardTest : public ::testing::Test {
 protected:
  EmptyShardTest()
      : checkpointer_(std::make_unique<MemoryStore>(), /*finalize_timeout=*/absl::Seconds(1)) {}

  // Shard `s` of the 3-shard job, shard 0 initialized with TestValue(0, i, 99).
  std::unique_ptr<ShardJob> Shard(int s) {
    auto job = ShardJob::Create(TinySpec(3), s, /*epoch=*/1);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return nullptr;
    if (s == 0) InitWithTestValues(**job, 1);
    return std::move(*job);
  }

  Checkpointer checkpointer_;
};

TEST_F(EmptyShardTest, TakesSettingsForAnyStepAndNoCheckpointRequest) {
  std::unique_ptr<ShardJob> first = Shard(0), last = Shard(2);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(last, nullptr);
  ASSERT_TRUE(last->range().empty());
  OptimizerParams p = *OptimizerFromProto(TestAdam(0.02));
  // The job is at step 4 (a scheduler sets lr 5): the empty shard stayed at 0.
  absl::Status set = last->SetOptimizer(p, 5);
  EXPECT_TRUE(set.ok()) << set;
  EXPECT_EQ(first->SetOptimizer(p, 5).code(), absl::StatusCode::kFailedPrecondition)
      << "shard 0 holds the elements and is at step 0";
  p.lr = -1.f;
  EXPECT_EQ(last->SetOptimizer(p, 6).code(), absl::StatusCode::kInvalidArgument);
  auto asked = last->RequestCheckpoint(7, /*cancel=*/false);
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_FALSE(asked->has_value());
  EXPECT_FALSE(last->CheckpointDueNext());
}

// Shard 0's snapshot alone makes a complete checkpoint: it writes the parts
// of the shards without elements. Before, shard 0 waited for them until the
// finalize deadline and gave the step up.
TEST_F(EmptyShardTest, ShardZerosSnapshotCompletesTheCheckpoint) {
  std::unique_ptr<ShardJob> first = Shard(0);
  ASSERT_NE(first, nullptr);
  auto snap = first->RequestCheckpoint(0, /*cancel=*/false);
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_TRUE(snap->has_value());
  ASSERT_TRUE(checkpointer_.Submit(std::move(**snap)).ok());
  checkpointer_.Drain();
  auto m = checkpointer_.Read("tiny", 0);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);
  EXPECT_EQ(m->shards[0].range_end, kParams);
  for (int s = 1; s < 3; ++s) {
    EXPECT_EQ(m->shards[s].range_begin, kParams);
    EXPECT_EQ(m->shards[s].range_end, kParams);
    EXPECT_EQ(m->shards[s].bytes, 0);
  }
  auto problems = checkpointer_.Verify(*m);
  ASSERT_TRUE(problems.ok()) << problems.status();
  EXPECT_TRUE(problems->empty());
}

// Restores from 3 shards (two empty) onto 1 and 2, and from 1 onto 3 and 4.
TEST_F(EmptyShardTest, RestoresOntoAnyShardCount) {
  std::unique_ptr<ShardJob> first = Shard(0);
  ASSERT_NE(first, nullptr);
  const std::vector<float> want = first->ParamsSnapshot();
  auto snap = first->RequestCheckpoint(0, false);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  ASSERT_TRUE(checkpointer_.Submit(std::move(**snap)).ok());
  checkpointer_.Drain();
  auto from3 = checkpointer_.Read("tiny", 0);
  ASSERT_TRUE(from3.ok()) << from3.status();
  for (int shards : {1, 2}) {
    auto restored = ShardJob::Restore(TinySpec(shards), 0, 2, *from3, &checkpointer_);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->ParamsSnapshot(), want) << shards << " shards";
  }
  // A checkpoint of the job on one shard, restored onto 3 and 4.
  auto one = ShardJob::Restore(TinySpec(1), 0, 2, *from3, &checkpointer_);
  ASSERT_TRUE(one.ok());
  auto one_snap = (*one)->RequestCheckpoint(0, false);
  ASSERT_TRUE(one_snap.ok() && one_snap->has_value());
  (*one_snap)->step = 1;  // beside step 0's checkpoint
  ASSERT_TRUE(checkpointer_.Submit(std::move(**one_snap)).ok());
  checkpointer_.Drain();
  auto from1 = checkpointer_.Read("tiny", 1);
  ASSERT_TRUE(from1.ok()) << from1.status();
  for (int shards : {3, 4}) {
    for (int s = 0; s < shards; ++s) {
      auto restored = ShardJob::Restore(TinySpec(shards), s, 2, *from1, &checkpointer_);
      ASSERT_TRUE(restored.ok()) << restored.status();
      EXPECT_EQ((*restored)->version(), 1);
      EXPECT_EQ((*restored)->ParamsSnapshot(), s == 0 ? want : std::vector<float>())
          << shards << " shards, shard " << s;
    }
  }
}

// Checkpoints written when the first shards were the empty ones (shard 2
// holding [0, 12)) still restore: the manifest records every range.
TEST_F(EmptyShardTest, CheckpointsWithLeadingEmptyShardsStillRestore) {
  std::unique_ptr<ShardJob> first = Shard(0);
  ASSERT_NE(first, nullptr);
  const std::vector<float> want = first->ParamsSnapshot();
  auto snap = first->RequestCheckpoint(0, false);
  ASSERT_TRUE(snap.ok() && snap->has_value());
  const ShardSnapshot all = **snap;
  for (int s = 0; s < 3; ++s) {
    ShardSnapshot old = all;
    old.shard = s;
    old.empty_shards.clear();
    if (s < 2) {
      old.range = Range{0, 0};
      old.values.clear();
      for (auto& slot : old.state) slot.clear();
    }
    ASSERT_TRUE(checkpointer_.Submit(std::move(old)).ok());
  }
  checkpointer_.Drain();
  auto m = checkpointer_.Read("tiny", 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->shards[2].range_begin, 0);
  auto restored = ShardJob::Restore(TinySpec(3), 0, 2, *m, &checkpointer_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->ParamsSnapshot(), want);
}

}  // namespace
}  // namespace tessel
