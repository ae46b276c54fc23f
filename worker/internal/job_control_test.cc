// JobControl against real shard servers in the test process
// (testing/inproc_cluster.h): every fan-out reaches the shards its contract
// names, setting up stops at the first failure, changing goes on past one,
// and failures name the call and the shard.
#include "worker/internal/job_control.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "testing/inproc_cluster.h"
#include "worker/internal/cluster_fixture.h"
#include "worker/internal/convert.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

// Two tensors of 128 floats aligned to 64 over two shards: each tensor on
// one shard.
const std::vector<TensorDesc> kTensors = {{"a", {128}}, {"b", {128}}};

class JobControlTest : public ClusterTest {
 protected:
  InProcCluster::Options ClusterOptions() override {
    InProcCluster::Options options;
    options.checkpoint_dir =
        absl::StrCat(::testing::TempDir(), "/job-control-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    return options;
  }

  // A zero2 job of kTensors on both shards, laid out.
  std::unique_ptr<JobContext> Context(const std::string& job,
                                      const std::vector<TensorDesc>& tensors = kTensors) {
    WorkerOptions o = cluster_->worker_options(job, 0, 1);
    o.align_elems = 64;
    auto ctx = std::make_unique<JobContext>(o);
    spec_ = MakeJobSpec(o, 1, tensors, 2);
    auto layout = ValidateJobSpec(spec_);
    EXPECT_TRUE(layout.ok()) << layout.status();
    ctx->layout = std::make_unique<Layout>(*layout);
    return ctx;
  }

  v1::CreateJobRequest Create(int64_t epoch) const {
    v1::CreateJobRequest req;
    *req.mutable_spec() = spec_;
    req.set_epoch(epoch);
    req.set_restore_step(-1);
    return req;
  }

  // CreateJob on one shard only, past JobControl.
  void CreateOn(int shard, int64_t epoch) {
    v1::CreateJobRequest req = Create(epoch);
    req.set_shard_index(shard);
    v1::CreateJobResponse resp;
    ASSERT_TRUE(
        fleet_.Call(shard, &v1::ShardServer::Stub::CreateJob, req, &resp, "CreateJob").ok());
  }

  bool HasJob(int shard, const std::string& job) {
    v1::JobRef ref;
    ref.set_job(job);
    v1::ShardStats st;
    return fleet_.Call(shard, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats").ok();
  }

  v1::JobSpec spec_;
};

TEST_F(JobControlTest, EachTensorLiesOnOneShard) {
  auto ctx = Context("layout");
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(ctx->layout->tensors()[t].range().Overlaps(ctx->layout->shard_range(t)));
    EXPECT_FALSE(ctx->layout->tensors()[t].range().Overlaps(ctx->layout->shard_range(1 - t)));
  }
}

TEST_F(JobControlTest, CreatesReadsChangesAndDeletesOnEveryShard) {
  auto ctx = Context("whole");
  JobControl control(ctx.get(), &fleet_);
  std::vector<int> checked;
  bool refused = true;
  ASSERT_TRUE(control
                  .CreateJob(
                      Create(7), "CreateJob",
                      [&](int shard, const v1::CreateJobResponse& resp) {
                        checked.push_back(shard);
                        EXPECT_EQ(resp.step(), 0);
                        return absl::OkStatus();
                      },
                      &refused)
                  .ok());
  EXPECT_EQ(checked, (std::vector<int>{0, 1}));
  EXPECT_FALSE(refused);

  auto stats = control.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  for (int shard = 0; shard < 2; ++shard) {
    const v1::ShardStats& st = (*stats)[static_cast<size_t>(shard)];
    EXPECT_EQ(st.epoch(), 7);
    EXPECT_EQ(st.step(), 0);
    EXPECT_EQ(st.range_begin(), ctx->layout->shard_range(shard).begin);
    EXPECT_EQ(st.range_end(), ctx->layout->shard_range(shard).end);
  }
  auto first = control.FirstShardStats();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->range_begin(), 0);
  auto epoch = control.MaxEpoch();
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(*epoch, 7);

  OptimizerParams sgd = ctx->options.optimizer;
  sgd.lr *= 2;
  absl::Status s = control.SetOptimizer(sgd, 1);
  EXPECT_TRUE(s.ok()) << s;
  s = control.SkipTensors({0, 1}, 1);
  EXPECT_TRUE(s.ok()) << s;
  // A checkpoint needs parameters: no INIT was sent.
  s = control.SaveCheckpoint(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("SaveCheckpoint on shard 0"));

  // Nothing has completed a step: no checkpoint, not under way.
  auto steps = control.CheckpointSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->empty());
  auto under_way = control.UnderWay(/*checkpoints=*/true);
  ASSERT_TRUE(under_way.ok()) << under_way.status();
  EXPECT_FALSE(*under_way);
  EXPECT_TRUE(absl::IsNotFound(control.GetCheckpoint(-1, "latest").status()));

  control.DeleteJob();
  EXPECT_FALSE(HasJob(0, "whole"));
  EXPECT_FALSE(HasJob(1, "whole"));
  EXPECT_TRUE(absl::IsNotFound(control.Stats().status()));
  epoch = control.MaxEpoch();
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(*epoch, -1);  // no shard holds it
  steps = control.CheckpointSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_TRUE(steps->empty());
  under_way = control.UnderWay(/*checkpoints=*/false);
  ASSERT_TRUE(under_way.ok()) << under_way.status();
  EXPECT_FALSE(*under_way);
}

// Issue 44: FrameKeys() names this process's registry membership
// (ctx.member_epoch) with its claim, so while it is the rank's registered
// worker no other process is handed the rank's keys by claiming that
// membership (a shard server hands a rank over only to the registered
// worker, away from a holder of another membership).
TEST_F(JobControlTest, FrameKeysNameTheWorkersRegistryMembership) {
  auto ctx = Context("keys");
  ctx->epoch = 1;
  const JobControl control(ctx.get(), &fleet_);
  ASSERT_TRUE(control.CreateJob(Create(1), "CreateJob", nullptr).ok());
  RegistryClient registry(cluster_->registry_address());
  v1::Member me;
  me.set_group("keys");
  me.set_role(v1::ROLE_WORKER);
  me.set_rank(ctx->id);
  ASSERT_TRUE(registry.Join(me).ok());
  ctx->member_epoch = registry.joined_epoch();
  ASSERT_GT(ctx->member_epoch.load(), 0);
  absl::StatusOr<std::vector<FrameKeyGrant>> grants = control.FrameKeys();
  ASSERT_TRUE(grants.ok()) << grants.status();
  ASSERT_EQ(grants->size(), 2u);
  ASSERT_FALSE((*grants)[1].rank_secret.empty()) << "shard 1 authenticates frames";
  // Another process (another claim) naming the same membership: refused.
  v1::FrameKeyRequest req;
  req.set_job("keys");
  req.set_rank(0);
  req.set_epoch(1);
  req.set_claim(std::string(32, 'x'));
  req.set_member_epoch(ctx->member_epoch.load());
  v1::FrameKeyResponse resp;
  absl::Status s = fleet_.Call(1, &v1::ShardServer::Stub::GetFrameKey, req, &resp, "GetFrameKey");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(resp.secret().empty());
  // The registered worker itself asking again: its keys, unchanged.
  absl::StatusOr<std::vector<FrameKeyGrant>> again = control.FrameKeys();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)[1].rank_secret, (*grants)[1].rank_secret);
}

TEST_F(JobControlTest, SettingUpStopsAtTheFirstRefusal) {
  auto ctx = Context("refused");
  JobControl control(ctx.get(), &fleet_);
  int checks = 0;
  bool refused = false;
  absl::Status s = control.CreateJob(
      Create(1), "CreateJob",
      [&](int, const v1::CreateJobResponse&) {
        ++checks;
        return absl::FailedPreconditionError("no");
      },
      &refused);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(refused);
  EXPECT_EQ(checks, 1);
  EXPECT_TRUE(HasJob(0, "refused"));
  EXPECT_FALSE(HasJob(1, "refused"));  // never called
  // Reading stops at the shard without the job, and names it.
  auto stats = control.Stats();
  EXPECT_TRUE(absl::IsNotFound(stats.status())) << stats.status();
  EXPECT_THAT(std::string(stats.status().message()), HasSubstr("GetStats on shard 1"));
}

TEST_F(JobControlTest, ARangeOtherThanTheLayoutsIsRefused) {
  // The worker lays out a larger model than the spec the servers get.
  auto other = Context("ranges", {{"a", {128}}, {"b", {384}}});
  auto ctx = Context("ranges");
  ASSERT_NE(other->layout->shard_range(0).end, ctx->layout->shard_range(0).end);
  const JobControl control(other.get(), &fleet_);
  bool refused = false;
  absl::Status s = control.CreateJob(Create(1), "CreateJob", nullptr, &refused);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_TRUE(refused);
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard 0 derived range"));
}

TEST_F(JobControlTest, AFailedCallIsNotARefusalAndNamesTheCallAndShard) {
  auto ctx = Context("bad");
  const JobControl control(ctx.get(), &fleet_);
  v1::CreateJobRequest req = Create(1);
  req.mutable_spec()->set_world_size(0);  // the servers refuse it
  bool refused = true;
  absl::Status s = control.CreateJob(req, "CreateJob", nullptr, &refused);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(refused);
  EXPECT_THAT(std::string(s.message()), HasSubstr("job 'bad' rank 0 step 0: CreateJob on shard 0"));
}

TEST_F(JobControlTest, ChangesGoOnPastAFailingShard) {
  auto ctx = Context("half");
  CreateOn(1, 3);  // the job only on shard 1
  const JobControl control(ctx.get(), &fleet_);
  OptimizerParams sgd = ctx->options.optimizer;
  absl::Status s = control.SetOptimizer(sgd, 1);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("SetOptimizer on shard 0"));
  s = control.SaveCheckpoint(1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("SaveCheckpoint on shard 0"));
  // Only the shards holding a skipped tensor are asked: tensor 1 lies on
  // shard 1, which has the job; tensor 0 on shard 0, which does not.
  EXPECT_TRUE(control.SkipTensors({1}, 1).ok());
  s = control.SkipTensors({0}, 1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("SkipTensors on shard 0"));
  // Reading the epoch counts the shard without the job as none.
  auto epoch = control.MaxEpoch();
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(*epoch, 3);
  // Deleting goes on past shard 0's NotFound.
  control.DeleteJob();
  EXPECT_FALSE(HasJob(1, "half"));
}

TEST_F(JobControlTest, ALimitedControlLeavesTheOtherShardsAlone) {
  auto ctx = Context("first");
  const JobControl everywhere(ctx.get(), &fleet_);
  ASSERT_TRUE(everywhere.CreateJob(Create(1), "CreateJob", nullptr).ok());
  const JobControl first_only(ctx.get(), &fleet_, /*num_shards=*/1);
  auto stats = first_only.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->size(), 1u);
  first_only.DeleteJob();
  EXPECT_FALSE(HasJob(0, "first"));
  EXPECT_TRUE(HasJob(1, "first"));
}

}  // namespace
}  // namespace tessel::internal
