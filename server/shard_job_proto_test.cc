// The ShardServer adapter: ReadShardState's answers carry what the job
// holds and, at the protocol's largest chunk, fit in a gRPC message even
// with a 3-slot optimizer; WriteShardState round-trips; ShardStatsProto
// carries the job's stats and its spec's fields, and the flight recorder's
// pull times, per-rank bytes and the step in progress's waiting list as the
// data path fills them.
#include "server/shard_job_proto.h"

#include <cstring>

#include "gtest/gtest.h"
#include "rpc/limits.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

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
  EXPECT_EQ(st.memory().params_bytes(), 2 * 400) << "two served versions (served_versions.h)";
  EXPECT_EQ(st.memory().optimizer_bytes(), 3 * 400);
  EXPECT_FALSE(st.state_digest().empty());
  EXPECT_TRUE(ShardStatsProto(**job, /*with_digest=*/false).state_digest().empty());
  ASSERT_EQ(st.worker_ids_size(), 2);
  EXPECT_EQ(st.worker_ids(1), 9);
}

// A 2-rank job of 2 buckets: one step by both ranks, each pulling while it
// is in progress and served as the data plane would (CountPulled per bucket
// sent), then step 1 half pushed.
TEST(ShardJobProtoTest, StatsCarryPullTimesBytesAndWhatTheStepWaitsFor) {
  std::unique_ptr<ShardJob> job =
      InitializedJob(OneTensorSpec("pulls", v1::STRATEGY_ZERO2, 2, 32, 16), 1);
  ASSERT_NE(job, nullptr);
  auto push = [&](int rank, int bucket) {
    FrameHeader h = JobFrame(*job, 1, FrameType::kPush, rank, bucket);
    ASSERT_TRUE(job->AcceptData(h).ok());
    ShardJob::Completion c = job->CompleteReceive(h, absl::OkStatus());
    ShardJob::Serve serve;
    if (c.update) serve = job->UpdateBucket(*c.update);
    for (const ShardJob::Puller& p : serve.pullers) {
      for (int b : p.buckets) job->CountPulled(p.rank, p.version, job->served_bytes(b));
    }
  };
  auto pull = [&](int rank) {
    FrameHeader h = JobFrame(*job, 1, FrameType::kPull, rank, 0);
    h.step = job->version() + 1;
    h.payload_bytes = 0;
    h.bucket_count = 2;
    absl::StatusOr<ShardJob::Serve> serve = job->AcceptPull(h, /*reply_to=*/rank);
    ASSERT_TRUE(serve.ok()) << serve.status();
  };
  const int64_t t0 = absl::ToUnixMicros(absl::Now());
  push(0, 0);
  push(0, 1);
  pull(0);
  push(1, 0);
  push(1, 1);  // the step ends: both pulls served
  pull(1);     // asks for the version in progress' result: step 1
  push(1, 0);
  v1::ShardStats st = ShardStatsProto(*job, /*with_digest=*/false);
  ASSERT_EQ(st.flight_size(), 2) << "step 0, and step 1 in progress";
  const v1::StepArrivals& s0 = st.flight(0);
  EXPECT_EQ(s0.step(), 0);
  ASSERT_EQ(s0.pull_asked_us_size(), 2);
  EXPECT_GE(s0.pull_asked_us(0), t0);
  EXPECT_GE(s0.pull_served_us(0), s0.pull_asked_us(0));
  EXPECT_EQ(s0.pull_asked_us(1), -1) << "rank 1 pulled step 0's result only after it ended";
  EXPECT_GE(st.flight(1).pull_asked_us(1), s0.end_us());
  EXPECT_EQ(st.flight(1).pull_served_us(1), -1) << "step 1 is not done";
  const int64_t bucket = job->served_bytes(0);
  ASSERT_EQ(st.rank_pushed_bytes_size(), 2);
  EXPECT_EQ(st.rank_pushed_bytes(0), 2 * bucket);
  EXPECT_EQ(st.rank_pushed_bytes(1), 3 * bucket);
  EXPECT_EQ(st.rank_pulled_bytes(0), 2 * bucket);
  EXPECT_EQ(st.rank_pulled_bytes(1), 0);
  EXPECT_EQ(st.pulled_bytes(), 2 * bucket);
  ASSERT_TRUE(st.has_waiting());
  const v1::StepWaiting& w = st.waiting();
  EXPECT_EQ(w.step(), 1);
  EXPECT_GE(w.started_us(), s0.end_us());
  EXPECT_EQ(w.num_buckets(), 2);
  EXPECT_FALSE(w.host_groups());
  ASSERT_EQ(w.slots_size(), 2);
  EXPECT_EQ(w.slots(0).slot(), 0);
  EXPECT_EQ(w.slots(0).not_pushed_size(), 2);
  EXPECT_EQ(w.slots(1).slot(), 1);
  ASSERT_EQ(w.slots(1).not_pushed_size(), 1);
  EXPECT_EQ(w.slots(1).not_pushed(0), 1);
  ASSERT_EQ(w.pulls_waiting_size(), 1);
  EXPECT_EQ(w.pulls_waiting(0), 1);
  push(0, 0);
  push(0, 1);
  push(1, 1);
  EXPECT_FALSE(ShardStatsProto(*job, false).has_waiting()) << "no step in progress";
}

}  // namespace
}  // namespace tessel
