// ElasticGrowth against real shard servers and a real registry in the test
// process (testing/inproc_cluster.h): a worker joining is one of the
// running job's workers or a newcomer (growth on), refused when the job is
// full or went on without it (growth off), or waits for a job that has not
// started; newcomers are read from the registry, and the agreed ones a
// recovery admits are those the view still has.
#include "worker/internal/elastic_growth.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/registry_client.h"
#include "rpc/shard_fleet.h"
#include "testing/inproc_cluster.h"
#include "worker/internal/cluster_fixture.h"
#include "worker/internal/convert.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kJobEpoch = 7;

class ElasticGrowthTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    registry_ = std::make_unique<RegistryClient>(cluster_->registry_address());
  }
  void TearDown() override {
    members_.clear();
    ClusterTest::TearDown();
  }

  // Job `job` running on both shards for the workers `ids` (registry ranks)
  // as a recovery records them: a DDP job re-created at step 0 (no
  // checkpoint needed).
  void StartJob(const std::string& job, const std::vector<int>& ids) {
    WorkerOptions o = cluster_->worker_options(job, 0, static_cast<int>(ids.size()));
    o.strategy = Strategy::kDdp;
    v1::CreateJobRequest req;
    *req.mutable_spec() = MakeJobSpec(o, static_cast<int>(ids.size()), {{"w", {64}}}, 2);
    req.set_epoch(kJobEpoch);
    req.set_replace(true);
    req.set_start_step(0);
    for (int id : ids) req.add_worker_ids(id);
    for (int shard = 0; shard < 2; ++shard) {
      req.set_shard_index(shard);
      v1::CreateJobResponse resp;
      ASSERT_TRUE(
          fleet_.Call(shard, &v1::ShardServer::Stub::CreateJob, req, &resp, "CreateJob").ok());
    }
  }
  // Registry rank `rank` joining `job` of world `world`; elastic_max_workers
  // `max` (0: growth off).
  std::unique_ptr<JobContext> Worker(const std::string& job, int rank, int world, int max) {
    WorkerOptions o = cluster_->worker_options(job, rank, world);
    o.elastic_max_workers = max;
    o.connect_timeout = absl::Milliseconds(600);
    return std::make_unique<JobContext>(o);
  }
  void Register(const std::string& job, int rank) {
    v1::Member m;
    m.set_group(job);
    m.set_role(v1::ROLE_WORKER);
    m.set_rank(rank);
    m.set_ucx_address(absl::StrCat("worker-", rank));
    members_.push_back(std::make_unique<RegistryClient>(cluster_->registry_address()));
    ASSERT_TRUE(members_.back()->Join(m, absl::Seconds(30)).ok());
  }

  std::unique_ptr<RegistryClient> registry_;
  std::vector<std::unique_ptr<RegistryClient>> members_;
};

TEST_F(ElasticGrowthTest, AWorkerBeyondTheRunningJobJoinsAsANewcomer) {
  StartJob("grow", {0, 1});
  auto ctx = Worker("grow", 2, 2, /*max=*/3);
  ElasticGrowth growth(ctx.get(), registry_.get(), &fleet_);
  auto running = growth.ClassifyJoin();
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_TRUE(running->has_value());
  EXPECT_EQ(**running, (std::vector<int>{0, 1}));
  EXPECT_TRUE(growth.newcomer());
  EXPECT_EQ(growth.join_epoch(), kJobEpoch);
  EXPECT_EQ(ctx->world_size, 2);
  EXPECT_EQ(ctx->rank.load(), 2);  // prospective: after the job's workers
  growth.Admitted();
  EXPECT_FALSE(growth.newcomer());

  // One of the job's own workers is no newcomer.
  auto own = Worker("grow", 1, 2, 3);
  ElasticGrowth mine(own.get(), registry_.get(), &fleet_);
  auto joined = mine.ClassifyJoin();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_FALSE(joined->has_value());
  EXPECT_FALSE(mine.newcomer());
}

TEST_F(ElasticGrowthTest, AFullJobHasNoRoomAndAJobNotStartedIsWaitedFor) {
  StartJob("full", {0, 1});
  auto ctx = Worker("full", 2, 2, /*max=*/2);
  ElasticGrowth full(ctx.get(), registry_.get(), &fleet_);
  absl::Status s = full.ClassifyJoin().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("elastic_max_workers=2: no room"));

  // Not started: a rank of the world goes ahead (it starts the job), a rank
  // beyond it waits, then says what it waited for.
  auto first = Worker("later", 0, 2, 3);
  ElasticGrowth starter(first.get(), registry_.get(), &fleet_);
  auto started = starter.ClassifyJoin();
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_FALSE(started->has_value());
  auto beyond = Worker("later", 2, 2, 3);
  ElasticGrowth waiter(beyond.get(), registry_.get(), &fleet_);
  s = waiter.ClassifyJoin().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("did not start on the shard servers"));
}

TEST_F(ElasticGrowthTest, GrowthOffRefusesAReplacementTheJobWentOnWithout) {
  StartJob("shrunk", {0, 2});  // an elastic recovery went on without 1
  auto ctx = Worker("shrunk", 1, 3, /*max=*/0);
  ctx->resume = true;
  ElasticGrowth growth(ctx.get(), registry_.get(), &fleet_);
  absl::Status s = growth.ClassifyJoin().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("the job went on without this worker"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("registry ranks 0, 2"));
  // Not resuming (a fresh start of the job), or one of its workers: no verdict.
  ctx->resume = false;
  EXPECT_TRUE(growth.ClassifyJoin().ok());
  auto survivor = Worker("shrunk", 2, 3, 0);
  survivor->resume = true;
  EXPECT_TRUE(ElasticGrowth(survivor.get(), registry_.get(), &fleet_).ClassifyJoin().ok());
}

TEST_F(ElasticGrowthTest, NewcomersComeFromTheRegistryAndThePresentOnesAreAdmitted) {
  for (int rank : {0, 1, 4, 3}) Register("view", rank);
  auto ctx = Worker("view", 0, 2, 4);
  ElasticGrowth growth(ctx.get(), registry_.get(), &fleet_);
  EXPECT_EQ(growth.Newcomers({0, 1}), (std::vector<int>{3, 4}));
  EXPECT_EQ(growth.step(), -1);
  growth.Plan({4, 5, 3}, 10);  // 5 agreed on, gone since
  EXPECT_EQ(growth.step(), 10);
  auto view = registry_->GetView("view");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(growth.Present(*view), (std::vector<int>{4, 3}));
  growth.Clear();
  EXPECT_EQ(growth.step(), -1);
  EXPECT_TRUE(growth.Present(*view).empty());
}

TEST(WorkerIdsOfTest, TheRecordedListOrTheWholeWorld) {
  v1::ShardStats st;
  st.set_world_size(3);
  EXPECT_EQ(WorkerIdsOf(st), (std::vector<int>{0, 1, 2}));
  st.add_worker_ids(4);
  st.add_worker_ids(1);
  EXPECT_EQ(WorkerIdsOf(st), (std::vector<int>{4, 1}));
}

}  // namespace
}  // namespace tessel::internal
