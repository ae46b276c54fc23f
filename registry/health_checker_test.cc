// HealthChecker against real in-process gRPC servers (grpc.health.v1 served
// by gRPC's default health service), over every Registry backend: a member
// is evicted after exactly `failure_threshold` consecutive failed checks
// (NOT_SERVING, or its server gone), never before, and a success resets the
// count.
#include "registry/health_checker.h"

#include <memory>

#include "gtest/gtest.h"
#include "proto/registry.grpc.pb.h"
#include "registry/backend_factory.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {

constexpr int kThreshold = 3;

class HealthCheckerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::Status available = RegistryBackends::Available(GetParam());
    if (!available.ok()) GTEST_SKIP() << available.message();
    auto made = backends_.Make(GetParam(), {.default_ttl = absl::Seconds(30)});
    ASSERT_TRUE(made.ok()) << made.status();
    registry_ = std::move(*made);
    checker_ = std::make_unique<HealthChecker>(
        registry_.get(), HealthCheckOptions{.period = absl::ZeroDuration(),
                                            .timeout = absl::Milliseconds(500),
                                            .failure_threshold = kThreshold,
                                            .credentials = {}});
  }

  // A shard server stand-in: a gRPC server that serves only grpc.health.v1.
  // gRPC wants at least one synchronous service of ours to poll for; an
  // unimplemented Registry service does.
  std::unique_ptr<grpc::Server> StartServer(std::string* address) {
    auto server = StartGrpcServer("127.0.0.1:0", {&placeholder_}, address);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  int64_t JoinServer(int rank, const std::string& address) {
    v1::Member m;
    m.set_group("pool");
    m.set_role(v1::ROLE_SERVER);
    m.set_rank(rank);
    m.set_grpc_address(address);
    auto joined = registry_->Join(m, absl::Seconds(30));
    EXPECT_TRUE(joined.ok()) << joined.status();
    return joined.ok() ? joined->lease_id : 0;
  }

  int Members() {
    auto view = registry_->GetView("pool");
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? view->members_size() : -1;
  }

  v1::Registry::Service placeholder_;
  RegistryBackends backends_{::testing::TempDir()};  // this test's own etcd, if any
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<HealthChecker> checker_;
};

TEST_P(HealthCheckerTest, NotServingIsEvictedAfterExactlyThresholdFailures) {
  std::string address;
  auto server = StartServer(&address);
  ASSERT_NE(server, nullptr);
  const int64_t lease = JoinServer(0, address);
  v1::Member worker;  // no grpc_address: never checked
  worker.set_group("pool");
  worker.set_role(v1::ROLE_WORKER);
  worker.set_rank(0);
  ASSERT_TRUE(registry_->Join(worker, absl::Seconds(30)).ok());

  EXPECT_TRUE(checker_->RunOnce().empty());  // serving
  server->GetHealthCheckService()->SetServingStatus(false);
  for (int i = 0; i < kThreshold - 1; ++i) EXPECT_TRUE(checker_->RunOnce().empty()) << i;
  // Serving again in between resets the count.
  server->GetHealthCheckService()->SetServingStatus(true);
  EXPECT_TRUE(checker_->RunOnce().empty());
  server->GetHealthCheckService()->SetServingStatus(false);
  for (int i = 0; i < kThreshold - 1; ++i) EXPECT_TRUE(checker_->RunOnce().empty()) << i;
  EXPECT_EQ(Members(), 2);
  const int64_t epoch = registry_->GetView("pool")->epoch();

  auto evicted = checker_->RunOnce();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].lease_id, lease);
  EXPECT_EQ(evicted[0].member.grpc_address(), address);
  auto view = registry_->GetView("pool");
  ASSERT_TRUE(view.ok());
  EXPECT_GT(view->epoch(), epoch);
  ASSERT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->members(0).role(), v1::ROLE_WORKER);
  EXPECT_EQ(registry_->Heartbeat(lease).status().code(), absl::StatusCode::kNotFound);
  server->Shutdown();
}

TEST_P(HealthCheckerTest, StoppedServerIsEvictedWhileItsLeaseIsRenewed) {
  std::string up_address, down_address;
  auto up = StartServer(&up_address);
  auto down = StartServer(&down_address);
  ASSERT_TRUE(up != nullptr && down != nullptr);
  const int64_t up_lease = JoinServer(0, up_address);
  const int64_t down_lease = JoinServer(1, down_address);
  EXPECT_TRUE(checker_->RunOnce().empty());
  down->Shutdown();  // the process hangs: its heartbeats go on, its service is gone
  for (int i = 0; i < kThreshold - 1; ++i) {
    ASSERT_TRUE(registry_->Heartbeat(down_lease).ok());
    EXPECT_TRUE(checker_->RunOnce().empty()) << i;
  }
  EXPECT_EQ(Members(), 2);
  auto evicted = checker_->RunOnce();
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].lease_id, down_lease);
  EXPECT_EQ(Members(), 1);
  EXPECT_TRUE(registry_->Heartbeat(up_lease).ok());
  EXPECT_EQ(registry_->Heartbeat(down_lease).status().code(), absl::StatusCode::kNotFound);
  up->Shutdown();
}

// The background thread evicts on its own, at period x threshold.
TEST_P(HealthCheckerTest, BackgroundChecksEvict) {
  std::string address;
  auto server = StartServer(&address);
  ASSERT_NE(server, nullptr);
  JoinServer(0, address);
  HealthChecker background(registry_.get(), {.period = absl::Milliseconds(100),
                                             .timeout = absl::Milliseconds(200),
                                             .failure_threshold = kThreshold,
                                             .credentials = {}});
  background.Start();
  server->GetHealthCheckService()->SetServingStatus(false);
  const absl::Time start = absl::Now();
  const int64_t epoch = registry_->GetView("pool")->epoch();
  auto view = registry_->WaitForChange("pool", epoch, absl::Seconds(10));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->members_size(), 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  background.Stop();
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Backends, HealthCheckerTest,
                         ::testing::ValuesIn(RegistryBackends::Names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessel
