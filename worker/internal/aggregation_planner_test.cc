// AggregationPlanner over a real registry in the test process (the memory
// backend behind gRPC, testing/inproc_cluster.h): the plan follows the host
// ids the workers and servers registered, the same for every rank given
// the same view; Use connects this worker to the other workers of its host
// (frames reach them), and says what is wrong, recoverably, when a peer is
// missing or unreachable.
#include "worker/internal/aggregation_planner.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/registry_client.h"
#include "testing/inproc_cluster.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"
#include "worker/internal/scripted_server.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "agg";

class AggregationPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.servers = 0;  // the registry alone
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override {
    channel_.reset();
    members_.clear();
    cluster_->Stop();
  }

  // Worker `rank` of kJob as registered from `host`, at `address` (an
  // endpoint that records what it gets, unless given).
  void Register(int rank, const std::string& host, std::string address = "") {
    if (address.empty()) {
      peers_.push_back(std::make_unique<ScriptedServer>(fabric_));
      address = peers_.back()->address();
    }
    v1::Member m;
    m.set_group(kJob);
    m.set_role(v1::ROLE_WORKER);
    m.set_rank(rank);
    m.set_ucx_address(address);
    m.set_host_id(host);
    members_.push_back(std::make_unique<RegistryClient>(cluster_->registry_address()));
    ASSERT_TRUE(members_.back()->Join(m, absl::Seconds(30)).ok());
  }
  v1::View View() {
    auto view = members_.front()->GetView(kJob);
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? *view : v1::View();
  }
  // This worker: data-parallel rank `rank` of `world`.
  AggregationPlanner& Planner(int rank, int world, Aggregation mode = Aggregation::kHost) {
    WorkerOptions o = cluster_->worker_options(kJob, rank, world);
    o.aggregation = mode;
    o.recovery = true;
    o.step_timeout = absl::Seconds(2);
    ctx_ = std::make_unique<JobContext>(o);
    channel_ = std::make_unique<DataChannel>(ctx_.get(), InProcTransport::Create(fabric_));
    planner_ = std::make_unique<AggregationPlanner>(ctx_.get(), channel_.get());
    planner_->SetServerHosts({"server-host"});
    return *planner_;
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  std::vector<std::unique_ptr<ScriptedServer>> peers_;  // by registration
  std::vector<std::unique_ptr<RegistryClient>> members_;
  std::unique_ptr<JobContext> ctx_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<AggregationPlanner> planner_;
};

TEST_F(AggregationPlannerTest, ThePlanFollowsTheRegisteredHostsTheSameOnEveryRank) {
  Register(0, "host-a");
  Register(1, "host-b");
  Register(2, "host-a");
  Register(3, "host-b");
  const v1::View view = View();
  for (int rank = 0; rank < 4; ++rank) {
    AggregationPlanner& planner = Planner(rank, 4);
    planner.SetWorkers(view);
    const AggregationPlan plan = planner.Plan({0, 1, 2, 3});
    EXPECT_EQ(plan.groups, (std::vector<int>{0, 1, 0, 1})) << rank;
    EXPECT_EQ(plan.why, "host aggregation: 2 hosts (ranks 0,2; 1,3)");
  }
  // Data-parallel order is the ids' order; a rank the view lacks is a host
  // of its own.
  AggregationPlanner& planner = Planner(0, 3);
  planner.SetWorkers(view);
  EXPECT_EQ(planner.Plan({2, 0, 7}).groups, (std::vector<int>{0, 0, 1}));
  // Auto: a server on another host makes sharing worth it; the servers on
  // the workers' own host (as a restarted one may be) already sum there.
  Planner(0, 4, Aggregation::kAuto).SetWorkers(view);
  EXPECT_EQ(planner_->Plan({0, 1, 2, 3}).groups, (std::vector<int>{0, 1, 0, 1}));
  planner_->SetServerHost(0, "host-a");
  EXPECT_TRUE(planner_->Plan({0, 2}).groups.empty());
}

TEST_F(AggregationPlannerTest, FlatWhenTheJobCannotSumInsideAHost) {
  Register(0, "host-a");
  Register(1, "host-a");
  AggregationPlanner& planner = Planner(0, 2);
  ctx_->options.precision = Precision::kBf16;
  planner.SetWorkers(View());
  const AggregationPlan plan = planner.Plan({0, 1});
  EXPECT_TRUE(plan.groups.empty());
  EXPECT_THAT(plan.why, HasSubstr("mixed precision"));
  EXPECT_EQ(HostAggregationUnsupported(*ctx_),
            "mixed precision: a host's partial sum would need fp32 on the wire");
}

TEST_F(AggregationPlannerTest, UseConnectsToTheHostsOtherWorkersAndSetsTheGroups) {
  Register(0, "host-a");
  Register(1, "host-a");
  Register(2, "host-b");
  AggregationPlanner& planner = Planner(0, 3);
  planner.SetWorkers(View());
  const AggregationPlan plan = planner.Plan({0, 1, 2});
  ASSERT_EQ(plan.groups, (std::vector<int>{0, 0, 1}));
  ASSERT_TRUE(planner.Use(plan, {0, 1, 2}).ok());
  EXPECT_EQ(ctx_->rank_groups, plan.groups);
  EXPECT_EQ(ctx_->aggregation, plan.why);

  // Rank 1 shares this host: a frame reaches it. Rank 2 does not: a send to
  // it fails the step, naming the way out.
  const FrameHeader ready = MakeHeader(FrameType::kReady, ctx_->job_id, 0, 0, 0, 0, 0);
  channel_->SendToWorker(1, ready, nullptr);
  auto got = peers_[1]->Await(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header.type, FrameType::kReady);
  channel_->SendToWorker(2, ready, nullptr);
  absl::Status s = channel_->WaitFor([] { return false; }, [] { return "x"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--aggregation=flat"));
}

TEST_F(AggregationPlannerTest, AMissingOrUnreachablePeerIsRecoverable) {
  Register(0, "host-a");
  Register(1, "host-a", "inproc-nowhere");
  AggregationPlanner& planner = Planner(0, 2);
  planner.SetWorkers(View());
  const AggregationPlan plan = planner.Plan({0, 1});
  ASSERT_EQ(plan.groups, (std::vector<int>{0, 0}));
  absl::Status unreachable = planner.Use(plan, {0, 1});
  EXPECT_EQ(unreachable.code(), absl::StatusCode::kUnavailable) << unreachable;
  EXPECT_THAT(std::string(unreachable.message()), HasSubstr("cannot reach rank 1 of this host"));
  EXPECT_TRUE(IsRecoverable(unreachable));

  v1::View without = View();
  without.clear_members();
  planner.SetWorkers(without);
  absl::Status missing = planner.Use(plan, {0, 1});
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnavailable) << missing;
  EXPECT_THAT(std::string(missing.message()), HasSubstr("is not in the registry view"));
  EXPECT_TRUE(IsRecoverable(missing));
}

}  // namespace
}  // namespace tessel::internal
