// ShardJob::SkipTensors: torch's rule for tensors no rank has a gradient for.
// A skipped tensor keeps its values and state; every tensor's update uses its
// own step (the job's minus its skips), so the shard equals torch's
// per-parameter loop bit for bit; the skips travel with the state (ReadState,
// WriteState, snapshots); bad requests are refused and change nothing.
#include <cstring>
#include <vector>

#include "core/reduce.h"
#include "gtest/gtest.h"
#include "server/shard_job.h"
#include "server/shard_job_proto.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 1;

// a [0, 24), b [24, 32), c [32, 64); buckets of 16 floats: 0 and 1 hold a,
// 1 holds b, 2 and 3 hold c.
v1::JobSpec Spec(v1::Strategy strategy = v1::STRATEGY_ZERO2) {
  v1::JobSpec spec;
  spec.set_job("skip");
  spec.set_strategy(strategy);
  spec.set_world_size(2);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(64);
  for (auto [name, n] : {std::pair{"a", 24}, {"b", 8}, {"c", 32}}) {
    auto* t = spec.add_tensors();
    t->set_name(name);
    t->add_shape(n);
    t->set_dtype(v1::DTYPE_F32);
  }
  *spec.mutable_optimizer() = TestAdam();
  spec.mutable_optimizer()->set_weight_decay(0.1);
  return spec;
}

OptimizerParams Adam() {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kAdam;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  return p;
}

class SkipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = ShardJob::Create(Spec(), 0, kEpoch);
    ASSERT_TRUE(created.ok()) << created.status();
    job_ = std::move(*created);
    ASSERT_EQ(job_->layout().num_buckets(0), 4);
    init_.resize(64);
    for (int i = 0; i < 64; ++i) init_[i] = 0.05f * static_cast<float>(i % 9) - 0.2f;
    for (int b = 0; b < 4; ++b) {
      FrameHeader h = Header(FrameType::kInit, 0, b);
      auto at = job_->AcceptData(h);
      ASSERT_TRUE(at.ok()) << at.status();
      std::memcpy(*at, init_.data() + 16 * b, 64);
      job_->CompleteReceive(h, absl::OkStatus());
    }
  }

  FrameHeader Header(FrameType type, int rank, int bucket) {
    return JobFrame(*job_, kEpoch, type, rank, bucket);
  }

  static float Grad(int64_t step, int rank, int i) {
    return 0.01f * static_cast<float>((i * 7 + rank * 3 + step * 5) % 11) - 0.05f;
  }

  void Push(int rank, int bucket) {
    FrameHeader h = Header(FrameType::kPush, rank, bucket);
    auto at = job_->AcceptData(h);
    ASSERT_TRUE(at.ok()) << at.status();
    std::vector<float> g(16);
    for (int i = 0; i < 16; ++i) g[i] = Grad(job_->version() + 1, rank, 16 * bucket + i);
    std::memcpy(*at, g.data(), 64);
    ShardJob::Completion c = job_->CompleteReceive(h, absl::OkStatus());
    if (c.update) job_->UpdateBucket(*c.update);
  }

  void Step() {
    for (int b = 0; b < 4; ++b) {
      for (int r = 0; r < 2; ++r) Push(r, b);
    }
  }

  std::unique_ptr<ShardJob> job_;
  std::vector<float> init_;
};

TEST_F(SkipTest, UpdatesEqualTorchsPerParameterLoop) {
  const std::vector<std::vector<int32_t>> skip = {{1}, {}, {0}, {0, 2}};
  // Reference: each tensor with its own step, no update without a gradient.
  std::vector<float> want = init_;
  std::vector<std::vector<float>> state(2, std::vector<float>(64, 0.f));
  const int64_t begin[] = {0, 24, 32}, size[] = {24, 8, 32};
  int64_t steps[3] = {0, 0, 0};
  for (size_t k = 0; k < skip.size(); ++k) {
    const int64_t step = static_cast<int64_t>(k) + 1;
    ASSERT_TRUE(job_->SkipTensors(skip[k], step).ok());
    Step();
    ASSERT_EQ(job_->version(), step);
    std::vector<float> mean(64);
    for (int i = 0; i < 64; ++i) {
      const float g[2] = {Grad(step, 0, i), Grad(step, 1, i)};
      const float* srcs[2] = {&g[0], &g[1]};
      ReduceMean(srcs, 2, &mean[i], 1);
    }
    for (int t = 0; t < 3; ++t) {
      if (std::find(skip[k].begin(), skip[k].end(), t) != skip[k].end()) continue;
      float* st[kMaxStateSlots] = {state[0].data() + begin[t], state[1].data() + begin[t]};
      ApplyUpdate(Adam(), ++steps[t], want.data() + begin[t], mean.data() + begin[t], st, size[t]);
    }
  }
  EXPECT_EQ(job_->ParamsSnapshot(), want);
  EXPECT_EQ(job_->tensor_skips(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(steps[0], 2);
  EXPECT_EQ(steps[2], 3);
}

TEST_F(SkipTest, BadRequestsAreRefusedAndChangeNothing) {
  const std::string digest = job_->Stats().state_digest;
  EXPECT_EQ(job_->SkipTensors({3}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_->SkipTensors({-1}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_->SkipTensors({1, 1}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_->SkipTensors({1}, 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job_->SkipTensors({1}, 0).code(), absl::StatusCode::kFailedPrecondition);
  // Every rank sends the same set: the same again is fine, another refused.
  ASSERT_TRUE(job_->SkipTensors({1}, 1).ok());
  ASSERT_TRUE(job_->SkipTensors({1}, 1).ok());
  absl::Status other = job_->SkipTensors({0, 1}, 1);
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.message().find("every rank must skip the same ones"), std::string::npos) << other;
  EXPECT_EQ(job_->SkipTensors({}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_->Stats().state_digest, digest);
  Step();
  EXPECT_EQ(job_->tensor_skips(), (std::vector<int64_t>{0, 1, 0}));

  // Too late for a tensor whose bucket every rank has pushed; not for others.
  Push(0, 1);
  Push(1, 1);
  absl::Status late = job_->SkipTensors({1}, 2);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("tensor 'b' cannot be skipped at step 2"), std::string::npos)
      << late;
  EXPECT_TRUE(job_->SkipTensors({2}, 2).ok());

  auto ddp = ShardJob::Create(Spec(v1::STRATEGY_DDP), 0, kEpoch);
  ASSERT_TRUE(ddp.ok());
  EXPECT_EQ((*ddp)->SkipTensors({1}, 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SkipTest, SkipsTravelWithTheState) {
  ASSERT_TRUE(job_->SkipTensors({0, 2}, 1).ok());
  Step();
  ASSERT_TRUE(job_->SkipTensors({2}, 2).ok());
  Step();
  auto snap = job_->RequestCheckpoint(2, false);
  ASSERT_TRUE(snap.ok() && snap->has_value()) << snap.status();
  EXPECT_EQ((*snap)->tensor_skips, (std::vector<int64_t>{1, 0, 2}));

  v1::ReadStateRequest read;
  read.set_job("skip");
  read.set_step(2);
  read.set_count(64);
  auto st = ReadShardState(*job_, read);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(std::vector<int64_t>(st->tensor_skips().begin(), st->tensor_skips().end()),
            (std::vector<int64_t>{1, 0, 2}));

  // A write carries its skips; counts that cannot be are refused.
  const std::string digest = job_->Stats().state_digest;
  v1::WriteStateRequest w;
  w.set_job("skip");
  w.set_step(5);
  w.set_params(st->params());
  w.set_state(st->state());
  w.set_commit(true);
  for (int64_t s : {0, 6, 1}) w.add_tensor_skips(s);  // 6 > step 5
  EXPECT_EQ(WriteShardState(*job_, w).status().code(), absl::StatusCode::kInvalidArgument);
  w.clear_tensor_skips();
  for (int64_t s : {0, 1}) w.add_tensor_skips(s);  // one count missing
  EXPECT_EQ(WriteShardState(*job_, w).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_->Stats().state_digest, digest);
  w.clear_tensor_skips();
  for (int64_t s : {0, 5, 1}) w.add_tensor_skips(s);
  ASSERT_TRUE(WriteShardState(*job_, w).ok());
  EXPECT_EQ(job_->tensor_skips(), (std::vector<int64_t>{0, 5, 1}));
  w.clear_tensor_skips();  // none: every tensor at the job's step again
  ASSERT_TRUE(WriteShardState(*job_, w).ok());
  EXPECT_TRUE(job_->tensor_skips().empty());
}

}  // namespace
}  // namespace tessel
