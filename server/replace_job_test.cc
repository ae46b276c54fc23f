// Recovery on the server side (JobTable::ReplaceJob): a job replaced from a
// checkpoint at a newer epoch drops its newer state, refuses frames of the
// old epoch, keeps its counters, replays bitwise, and refuses a stale or
// conflicting replace while accepting the same one again.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/checkpoint_store.h"
#include "server/checkpointer.h"
#include "server/job_table.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;

v1::JobSpec Spec(v1::Strategy strategy) {
  v1::JobSpec spec;
  spec.set_job("r");
  spec.set_strategy(strategy);
  spec.set_world_size(kWorld);
  spec.set_num_shards(1);
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(100);
  t->set_dtype(v1::DTYPE_F32);
  spec.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
  spec.mutable_optimizer()->set_lr(0.01);
  spec.mutable_optimizer()->set_beta1(0.9);
  spec.mutable_optimizer()->set_beta2(0.999);
  spec.mutable_optimizer()->set_eps(1e-8);
  spec.set_bucket_bytes(128);  // several buckets
  spec.set_align_elems(8);
  return spec;
}

class ReplaceJobTest : public ::testing::Test {
 protected:
  ReplaceJobTest()
      : checkpointer_(std::make_unique<MemoryStore>(), absl::Seconds(5)), jobs_(&checkpointer_) {}

  v1::CreateJobRequest Request(v1::Strategy strategy, int64_t epoch) {
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec(strategy);
    req.set_shard_index(0);
    req.set_epoch(epoch);
    return req;
  }
  FrameHeader Header(FrameType type, int64_t epoch, int64_t step, int rank, int bucket,
                     const ShardJob& job) {
    FrameHeader h;
    h.type = type;
    h.job_id = JobId("r");
    h.epoch = epoch;
    h.step = step;
    h.rank = rank;
    h.shard = 0;
    h.bucket = bucket;
    h.payload_bytes = static_cast<uint64_t>(job.layout().bucket_range(0, bucket).size()) * 4;
    return h;
  }
  void Init(ShardJob& job, int64_t epoch) {
    for (int b = 0; b < job.layout().num_buckets(0); ++b) {
      FrameHeader h = Header(FrameType::kInit, epoch, 0, 0, b, job);
      auto dst = job.AcceptData(h);
      ASSERT_TRUE(dst.ok()) << dst.status();
      const Range r = job.layout().bucket_range(0, b);
      for (int64_t i = 0; i < r.size(); ++i) static_cast<float*>(*dst)[i] = 0.01f * (r.begin + i);
      job.CompleteReceive(h, absl::OkStatus());
    }
  }
  // One step: every rank pushes a gradient that is a function of (step, rank).
  void Step(ShardJob& job, int64_t epoch) {
    const int64_t step = job.version();
    for (int b = 0; b < job.layout().num_buckets(0); ++b) {
      for (int rank = 0; rank < kWorld; ++rank) {
        FrameHeader h = Header(FrameType::kPush, epoch, step, rank, b, job);
        auto dst = job.AcceptData(h);
        ASSERT_TRUE(dst.ok()) << dst.status();
        const Range r = job.layout().bucket_range(0, b);
        for (int64_t i = 0; i < r.size(); ++i) {
          static_cast<float*>(*dst)[i] =
              0.001f * ((r.begin + i) % 7) - 0.002f * step + 0.0005f * rank;
        }
        ShardJob::Completion c = job.CompleteReceive(h, absl::OkStatus());
        if (c.update.has_value()) job.UpdateBucket(*c.update);
      }
    }
    ASSERT_EQ(job.version(), step + 1);
  }
  Checkpointer checkpointer_;
  JobTable jobs_;
};

TEST_F(ReplaceJobTest, RollsBackRefusesTheOldEpochAndReplaysBitwise) {
  ASSERT_TRUE(jobs_.CreateJob(Request(v1::STRATEGY_ZERO2, 3)).ok());
  std::shared_ptr<ShardJob> old = jobs_.FindJob("r");
  Init(*old, 3);
  for (int k = 0; k < 3; ++k) Step(*old, 3);
  v1::SaveCheckpointRequest save;
  save.set_job("r");
  save.set_step(3);
  ASSERT_TRUE(jobs_.SaveCheckpoint(save).ok());
  checkpointer_.Drain();
  const std::string at3 = old->Stats().state_digest;
  Step(*old, 3);
  Step(*old, 3);
  const std::string at5 = old->Stats().state_digest;
  // A frame of an older epoch is refused and counted.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      old->AcceptData(Header(FrameType::kPush, 2, 5, 0, 0, *old)).status()));

  v1::CreateJobRequest replace = Request(v1::STRATEGY_ZERO2, 4);
  replace.set_restore(true);
  replace.set_restore_step(3);
  replace.set_replace(true);
  auto r = jobs_.CreateJob(replace);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->created());
  EXPECT_EQ(r->step(), 3);
  std::shared_ptr<ShardJob> job = jobs_.FindJob("r");
  ASSERT_NE(job, old);
  JobStats st = job->Stats();
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(st.epoch, 4);
  EXPECT_EQ(st.restored_from_step, 3);
  EXPECT_EQ(st.state_digest, at3);  // the state of step 5 is gone
  EXPECT_EQ(st.counters.recoveries, 1);
  EXPECT_EQ(st.counters.applied_steps, 5);
  EXPECT_EQ(st.counters.stale_epoch, 1);

  // The old epoch's frames are refused by the new job.
  EXPECT_TRUE(absl::IsFailedPrecondition(
      job->AcceptData(Header(FrameType::kPush, 3, 3, 0, 0, *job)).status()));
  EXPECT_EQ(job->Stats().counters.stale_epoch, 2);

  // The same replace again changes nothing; a stale or conflicting one is refused.
  auto again = jobs_.CreateJob(replace);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  EXPECT_EQ(jobs_.FindJob("r"), job);
  v1::CreateJobRequest older = replace;
  older.set_epoch(3);
  EXPECT_TRUE(absl::IsFailedPrecondition(jobs_.CreateJob(older).status()));
  v1::CreateJobRequest other_step = replace;
  other_step.set_restore_step(0);
  EXPECT_TRUE(absl::IsFailedPrecondition(jobs_.CreateJob(other_step).status()));

  // Replaying steps 3 and 4 gives the bits of the first time.
  Step(*job, 4);
  Step(*job, 4);
  EXPECT_EQ(job->Stats().state_digest, at5);
  EXPECT_EQ(job->Stats().counters.applied_steps, 7);
}

// A worker that finished one recovery pushed and pulled the next step; a
// second recovery (the first worker's own pull failed, so it restored again
// at a newer epoch) replaces the job. The pull it still owed is handed to
// the listener (the data plane answers it with an ERROR of its epoch, which
// the worker's step reports as recoverable at once) instead of waiting for
// the step timeout; the new job owes nothing.
TEST_F(ReplaceJobTest, PullsTheReplacedJobOwedGoToTheListener) {
  std::vector<ShardJob::Puller> told;
  int64_t told_epoch = -1;
  jobs_.SetReplacedListener([&](ShardJob& old, const std::vector<ShardJob::Puller>& waiting) {
    told_epoch = old.epoch();
    told = waiting;
  });
  ASSERT_TRUE(jobs_.CreateJob(Request(v1::STRATEGY_ZERO2, 3)).ok());
  std::shared_ptr<ShardJob> old = jobs_.FindJob("r");
  Init(*old, 3);
  Step(*old, 3);
  v1::SaveCheckpointRequest save;
  save.set_job("r");
  save.set_step(1);
  ASSERT_TRUE(jobs_.SaveCheckpoint(save).ok());
  Step(*old, 3);  // the snapshot of step 1 is taken as step 2 begins
  checkpointer_.Drain();
  // Rank 1 pulls step 3 (in flight: the shard is at 2) and waits.
  FrameHeader pull = Header(FrameType::kPull, 3, 3, 1, 0, *old);
  pull.payload_bytes = 0;
  pull.bucket_count = static_cast<uint32_t>(old->layout().num_buckets(0));
  auto serve = old->AcceptPull(pull, /*reply_to=*/42);
  ASSERT_TRUE(serve.ok()) << serve.status();
  EXPECT_TRUE(serve->pullers.empty());  // deferred

  v1::CreateJobRequest replace = Request(v1::STRATEGY_ZERO2, 5);
  replace.set_restore(true);
  replace.set_restore_step(1);
  replace.set_replace(true);
  ASSERT_TRUE(jobs_.CreateJob(replace).ok());
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told_epoch, 3);
  EXPECT_EQ(told[0].reply_to, 42u);
  EXPECT_EQ(told[0].rank, 1);
  EXPECT_EQ(told[0].version, 3);
  EXPECT_EQ(told[0].bucket_count, old->layout().num_buckets(0));
  EXPECT_TRUE(old->TakeWaitingPulls().empty());  // handed over once

  // The same replace again replaces nothing and tells nobody.
  told.clear();
  ASSERT_TRUE(jobs_.CreateJob(replace).ok());
  EXPECT_TRUE(told.empty());
  jobs_.SetReplacedListener(nullptr);
}

TEST_F(ReplaceJobTest, ZeroNeedsACheckpointAndDdpStartsEmptyAtTheWorkersStep) {
  v1::CreateJobRequest zero = Request(v1::STRATEGY_ZERO1, 2);
  zero.set_replace(true);
  EXPECT_TRUE(absl::IsInvalidArgument(jobs_.CreateJob(zero).status()));
  zero.set_restore(true);
  zero.set_restore_step(9);
  EXPECT_TRUE(absl::IsNotFound(jobs_.CreateJob(zero).status()));  // no such checkpoint

  ASSERT_TRUE(jobs_.CreateJob(Request(v1::STRATEGY_DDP, 2)).ok());
  v1::CreateJobRequest ddp = Request(v1::STRATEGY_DDP, 3);
  ddp.set_replace(true);
  ddp.set_start_step(7);
  auto r = jobs_.CreateJob(ddp);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->step(), 7);
  JobStats st = jobs_.FindJob("r")->Stats();
  EXPECT_EQ(st.step, 7);
  EXPECT_EQ(st.epoch, 3);
  EXPECT_EQ(st.counters.recoveries, 1);
}

// Elastic recovery: the replace records the survivors' registry ranks (in
// their new rank order) for the smaller world; bad lists are refused and
// change nothing; the same replace again is accepted, a different list at the
// same epoch and step is refused as a conflict.
TEST_F(ReplaceJobTest, ElasticReplaceRecordsTheWorkersForTheSmallerWorld) {
  ASSERT_TRUE(jobs_.CreateJob(Request(v1::STRATEGY_DDP, 2)).ok());
  EXPECT_EQ(jobs_.FindJob("r")->Stats().worker_ids.size(), 0u);  // 0..world-1

  v1::CreateJobRequest shrink = Request(v1::STRATEGY_DDP, 3);
  shrink.set_replace(true);
  shrink.set_start_step(4);
  shrink.mutable_spec()->set_world_size(1);
  shrink.add_worker_ids(1);
  shrink.add_worker_ids(0);
  EXPECT_TRUE(absl::IsInvalidArgument(jobs_.CreateJob(shrink).status()));  // 2 ids, world 1
  shrink.clear_worker_ids();
  shrink.mutable_spec()->set_world_size(2);
  shrink.add_worker_ids(1);
  shrink.add_worker_ids(1);
  EXPECT_TRUE(absl::IsInvalidArgument(jobs_.CreateJob(shrink).status()));  // duplicate
  shrink.set_worker_ids(1, -1);
  EXPECT_TRUE(absl::IsInvalidArgument(jobs_.CreateJob(shrink).status()));  // negative
  EXPECT_EQ(jobs_.FindJob("r")->Stats().epoch, 2);                         // nothing changed

  shrink.clear_worker_ids();
  shrink.mutable_spec()->set_world_size(1);
  shrink.add_worker_ids(2);
  auto r = jobs_.CreateJob(shrink);
  ASSERT_TRUE(r.ok()) << r.status();
  JobStats st = jobs_.FindJob("r")->Stats();
  EXPECT_EQ(jobs_.FindJob("r")->spec().world_size(), 1);
  ASSERT_EQ(st.worker_ids.size(), 1u);
  EXPECT_EQ(st.worker_ids[0], 2);
  EXPECT_EQ(st.epoch, 3);
  EXPECT_TRUE(jobs_.CreateJob(shrink).ok());  // the same one again

  shrink.set_worker_ids(0, 0);  // another survivor set at the same epoch and step
  EXPECT_TRUE(absl::IsFailedPrecondition(jobs_.CreateJob(shrink).status()));
  EXPECT_EQ(jobs_.FindJob("r")->Stats().worker_ids[0], 2);
}

// A checkpoint restores under another shape (shards, world, buckets) but
// not another model, strategy or optimizer; an unreadable spec is data loss.
TEST_F(ReplaceJobTest, RestoreKeepsTheModelAndMayChangeTheShape) {
  ASSERT_TRUE(jobs_.CreateJob(Request(v1::STRATEGY_ZERO2, 1)).ok());
  std::shared_ptr<ShardJob> job = jobs_.FindJob("r");
  Init(*job, 1);
  Step(*job, 1);
  v1::SaveCheckpointRequest save;
  save.set_job("r");
  save.set_step(1);
  ASSERT_TRUE(jobs_.SaveCheckpoint(save).ok());
  checkpointer_.Drain();
  auto manifest = checkpointer_.Read("r", 1);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  v1::JobSpec reshaped = Spec(v1::STRATEGY_ZERO2);
  reshaped.set_bucket_bytes(256);
  reshaped.set_world_size(3);
  auto restored = ShardJob::Restore(reshaped, 0, 2, *manifest, &checkpointer_);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->ParamsSnapshot(), job->ParamsSnapshot());
  v1::JobSpec other = Spec(v1::STRATEGY_ZERO2);
  other.mutable_optimizer()->set_lr(0.02);
  EXPECT_EQ(ShardJob::Restore(other, 0, 2, *manifest, &checkpointer_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  Manifest unreadable = *manifest;
  unreadable.spec_json = "{";
  EXPECT_EQ(ShardJob::Restore(reshaped, 0, 2, unreadable, &checkpointer_).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tessel
