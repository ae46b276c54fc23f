// StallWatcher: a step stuck in progress is reported (naming what it waits
// for), again after another period, and an idle job never is.
#include "server/stall_watcher.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

v1::JobSpec Spec(const std::string& name) {
  v1::JobSpec spec;
  spec.set_job(name);
  spec.set_strategy(v1::STRATEGY_DDP);
  spec.set_world_size(2);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(64);
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(16);
  t->set_dtype(v1::DTYPE_F32);
  spec.mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec.mutable_optimizer()->set_lr(0.1);
  return spec;
}

TEST(StallWatcherTest, ReportsAStuckStepEveryPeriodAndNeverAnIdleJob) {
  auto stuck = ShardJob::Create(Spec("stuck"), 0, 1);
  auto idle = ShardJob::Create(Spec("idle"), 0, 1);
  ASSERT_TRUE(stuck.ok() && idle.ok());
  std::vector<std::shared_ptr<ShardJob>> jobs = {std::move(*stuck), std::move(*idle)};
  // Rank 0 pushes bucket 0 of step 0; rank 1 never does.
  FrameHeader h;
  h.type = FrameType::kPush;
  h.job_id = JobId("stuck");
  h.epoch = 1;
  h.payload_bytes = 64;
  ASSERT_TRUE(jobs[0]->AcceptData(h).ok());
  jobs[0]->CompleteReceive(h, absl::OkStatus());

  absl::Mutex mu;
  std::vector<std::string> reports;
  {
    StallWatcher watcher([&] { return jobs; }, absl::Milliseconds(200),
                         [&](const std::string& r) {
                           absl::MutexLock lock(&mu);
                           reports.push_back(r);
                         });
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<std::string>* r) { return r->size() >= 2; }, &reports),
        absl::Seconds(10)));
  }
  absl::MutexLock lock(&mu);
  ASSERT_GE(reports.size(), 2u);
  for (const std::string& r : reports) {
    EXPECT_EQ(r.rfind("job 'stuck' shard 0: step 0 (epoch 1) stalled for ", 0), 0u) << r;
    EXPECT_NE(r.find("waiting for pushes from rank 1 (bucket 0 of 1)"), std::string::npos) << r;
  }
}

}  // namespace
}  // namespace tessel
