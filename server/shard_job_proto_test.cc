// The ShardServer adapter: ReadShardState's answers carry what the job
// holds and, at the protocol's largest chunk, fit in a gRPC message even
// with a 3-slot optimizer; WriteShardState round-trips; ShardStatsProto
// carries the job's stats and its spec's fields.
#include "server/shard_job_proto.h"

#include <cstring>

#include "gtest/gtest.h"
#include "rpc/limits.h"
#include "server/shard_job.h"

namespace tessel {
namespace {

v1::JobSpec Spec(int64_t elements, v1::OptimizerConfig optimizer) {
  v1::JobSpec spec;
  spec.set_job("proto");
  spec.set_strategy(v1::STRATEGY_ZERO2);
  spec.set_world_size(2);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(int64_t{1} << 24);
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(elements);
  t->set_dtype(v1::DTYPE_F32);
  *spec.mutable_optimizer() = optimizer;
  return spec;
}

v1::OptimizerConfig CenteredRmspropWithMomentum() {
  v1::OptimizerConfig o;
  o.set_kind(v1::OptimizerConfig::RMSPROP);
  o.set_lr(1e-3);
  o.set_momentum(0.9);
  o.set_centered(true);
  o.set_alpha(0.99);
  o.set_eps(1e-8);
  return o;
}

// Writes `n` elements (and every slot) of a job at `step` in one chunk.
void WriteAll(ShardJob& job, int64_t n, int slots, int64_t step) {
  std::vector<float> params(static_cast<size_t>(n)), state(static_cast<size_t>(n) * slots);
  for (int64_t i = 0; i < n; ++i) params[i] = static_cast<float>(i);
  for (size_t i = 0; i < state.size(); ++i) state[i] = -static_cast<float>(i);
  v1::WriteStateRequest w;
  w.set_step(step);
  w.set_params(std::string(reinterpret_cast<const char*>(params.data()), params.size() * 4));
  w.set_state(std::string(reinterpret_cast<const char*>(state.data()), state.size() * 4));
  w.set_commit(true);
  w.add_tensor_skips(0);
  auto r = WriteShardState(job, w);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step(), step);
  EXPECT_EQ(r->staged(), 0);
}

TEST(ShardJobProtoTest, TheLargestReadStateAnswerFitsInAGrpcMessage) {
  const int64_t n = kMaxStateElementsPerCall + 5;  // one full chunk and a bit
  auto job = ShardJob::Create(Spec(n, CenteredRmspropWithMomentum()), 0, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_NO_FATAL_FAILURE(WriteAll(**job, n, kMaxStateSlots, 4));
  v1::ReadStateRequest read;
  read.set_job("proto");
  read.set_step(4);
  read.set_count(kMaxStateElementsPerCall);
  auto st = ReadShardState(**job, read);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->state_slots(), kMaxStateSlots) << "the most slots any optimizer keeps";
  EXPECT_EQ(st->params().size(), static_cast<size_t>(kMaxStateElementsPerCall) * 4);
  EXPECT_LT(st->ByteSizeLong(), static_cast<size_t>(kGrpcMaxMessageBytes));
  // The same chunk as a WriteState request fits too.
  v1::WriteStateRequest w;
  w.set_job("proto");
  w.set_params(st->params());
  w.set_state(st->state());
  EXPECT_LT(w.ByteSizeLong(), static_cast<size_t>(kGrpcMaxMessageBytes));
  // One element more is refused.
  read.set_count(kMaxStateElementsPerCall + 1);
  EXPECT_EQ(ReadShardState(**job, read).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardJobProtoTest, ReadStateAnswersWhatWriteStateCommitted) {
  v1::OptimizerConfig adam;
  adam.set_kind(v1::OptimizerConfig::ADAM);
  adam.set_lr(1e-3);
  adam.set_beta1(0.9);
  adam.set_beta2(0.999);
  adam.set_eps(1e-8);
  auto job = ShardJob::Create(Spec(100, adam), 0, 1);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_NO_FATAL_FAILURE(WriteAll(**job, 100, 2, 3));
  v1::ReadStateRequest read;
  read.set_step(3);
  read.set_epoch(1);
  read.set_offset(10);
  read.set_count(20);
  auto st = ReadShardState(**job, read);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->step(), 3);
  EXPECT_EQ(st->range_begin(), 0);
  EXPECT_EQ(st->range_end(), 100);
  EXPECT_EQ(st->offset(), 10);
  EXPECT_EQ(st->state_slots(), 2);
  ASSERT_EQ(st->params().size(), 80u);
  ASSERT_EQ(st->state().size(), 160u);
  float p, s1;
  std::memcpy(&p, st->params().data(), 4);
  std::memcpy(&s1, st->state().data() + 80, 4);  // slot 1, element 10
  EXPECT_EQ(p, 10.f);
  EXPECT_EQ(s1, -110.f);
  EXPECT_EQ(st->tensor_skips_size(), 0) << "no skips: nothing to carry";
}

TEST(ShardJobProtoTest, StatsCarryTheJobsCountsAndItsSpec) {
  auto job = ShardJob::Create(Spec(100, CenteredRmspropWithMomentum()), 0, 7);
  ASSERT_TRUE(job.ok()) << job.status();
  (*job)->CountRejected();
  (*job)->CountPulled(/*rank=*/0, /*version=*/1, 123);
  (*job)->SetWorkerIds({4, 9});
  const v1::ShardStats st = ShardStatsProto(**job);
  EXPECT_EQ(st.job(), "proto");
  EXPECT_EQ(st.strategy(), "zero2");
  EXPECT_EQ(st.world_size(), 2);
  EXPECT_EQ(st.num_shards(), 1);
  EXPECT_EQ(st.num_params(), 100);
  EXPECT_EQ(st.range_end(), 100);
  EXPECT_EQ(st.epoch(), 7);
  EXPECT_EQ(st.rejected_frames(), 1);
  EXPECT_EQ(st.pulled_bytes(), 123);
  EXPECT_EQ(st.memory().params_bytes(), 400);
  EXPECT_EQ(st.memory().optimizer_bytes(), 3 * 400);
  EXPECT_FALSE(st.state_digest().empty());
  EXPECT_TRUE(ShardStatsProto(**job, /*with_digest=*/false).state_digest().empty());
  ASSERT_EQ(st.worker_ids_size(), 2);
  EXPECT_EQ(st.worker_ids(1), 9);
}

}  // namespace
}  // namespace tessel
