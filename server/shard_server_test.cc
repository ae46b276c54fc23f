// ShardServer in-process: shard servers over the in-process transport join an
// embedded registry on loopback, answer control RPCs over gRPC, exchange
// frames with a worker-side endpoint, join again when their lease is lost
// (or end, with exit_on_lost_lease), and report readiness truthfully.
#include "server/shard_server.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"
#include "server/server_test_fixture.h"
#include "transport/inproc/inproc_transport.h"

namespace tessel {
namespace {

constexpr int kFloats = 8;

class ShardServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status started = registry_.Start();
    ASSERT_TRUE(started.ok()) << started;
    registry_address_ = registry_.address();
  }
  void TearDown() override { registry_.Stop(); }

  absl::StatusOr<std::unique_ptr<ShardServer>> StartShard(
      int shard, const std::function<void(ShardServerOptions*)>& adjust = {}) {
    ShardServerOptions options;
    options.registry = registry_address_;
    options.shard = shard;
    options.lease_ttl = absl::Milliseconds(600);
    options.receive_check_period = absl::Milliseconds(100);  // inproc: nothing to check
    if (adjust) adjust(&options);
    return ShardServer::Start(options, InProcTransport::Create(fabric_));
  }

  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  TestRegistry registry_;
  std::string registry_address_;
};

// DDP, world 1, one shard of one bucket: the served mean is the pushed gradient.
v1::CreateJobRequest DdpJob() { return OneBucketDdpJob("j", 1, kFloats); }

FrameHeader Header(FrameType type, int64_t step, uint64_t payload_bytes) {
  return TestFrameHeader(type, "j", 1, step, 0, payload_bytes);
}

TEST_F(ShardServerTest, JoinsAnswersControlRpcsAndServesFrames) {
  auto server = StartShard(0);
  ASSERT_TRUE(server.ok()) << server.status();
  ShardServer& s = **server;

  RegistryClient viewer(registry_address_);
  auto view = viewer.GetView("default");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->members(0).role(), v1::ROLE_SERVER);
  EXPECT_EQ(view->members(0).rank(), 0);
  EXPECT_EQ(view->members(0).grpc_address(), s.grpc_address());
  EXPECT_EQ(view->members(0).ucx_address(), s.transport_address());

  auto stub = v1::ShardServer::NewStub(MakeChannel(s.grpc_address()));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ServerInfoResponse info;
    ASSERT_TRUE(stub->GetServerInfo(&ctx, v1::ServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.shard_index(), 0);
    EXPECT_EQ(info.pool(), "default");
    EXPECT_EQ(info.ucx_address(), s.transport_address());
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::CreateJobResponse created;
    grpc::Status st = stub->CreateJob(&ctx, DdpJob(), &created);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(created.created());
    EXPECT_EQ(created.range_end() - created.range_begin(), kFloats);
  }

  // A worker-side endpoint: push a gradient for step 0, pull step 1.
  auto worker = InProcTransport::Create(fabric_);
  std::vector<float> params(kFloats, 0.f);
  absl::Notification served;
  FrameHeader got;
  worker->SetHandler([&](const Incoming& in) {
    auto h = DecodeHeader(in.header.data(), in.header.size());
    if (!h.ok() || h->type != FrameType::kParams) {
      ADD_FAILURE() << "unexpected frame: "
                    << (h.ok() ? DescribeHeader(*h) : h.status().ToString());
      return Accept{};
    }
    got = *h;
    return Accept{params.data(), params.size() * sizeof(float), [&](absl::Status st) {
                    EXPECT_TRUE(st.ok()) << st;
                    served.Notify();
                  }};
  });
  auto peer = worker->Connect(s.transport_address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::vector<float> grad(kFloats);
  for (int i = 0; i < kFloats; ++i) grad[i] = 0.5f * i - 1.f;
  HeaderBytes push = EncodeHeader(Header(FrameType::kPush, 0, kFloats * 4));
  worker->Send(*peer, absl::MakeConstSpan(push), grad.data(), kFloats * 4,
               [](absl::Status st) { EXPECT_TRUE(st.ok()) << st; });
  HeaderBytes pull = EncodeHeader(Header(FrameType::kPull, 1, 0));
  worker->Send(*peer, absl::MakeConstSpan(pull), nullptr, 0, nullptr);
  ASSERT_TRUE(served.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(got.step, 1);
  EXPECT_EQ(got.payload_bytes, uint64_t{kFloats * 4});
  EXPECT_EQ(std::memcmp(params.data(), grad.data(), kFloats * 4), 0);

  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::JobRef ref;
    ref.set_job("j");
    v1::ShardStats stats;
    ASSERT_TRUE(stub->GetStats(&ctx, ref, &stats).ok());
    EXPECT_EQ(stats.step(), 1);
    EXPECT_EQ(stats.pushed_bytes(), kFloats * 4);
    EXPECT_EQ(stats.pulled_bytes(), kFloats * 4);
    EXPECT_EQ(stats.rejected_frames(), 0);
  }
  worker->Shutdown();

  EXPECT_FALSE(s.WaitFor(absl::Milliseconds(300)).has_value()) << "still running";
  s.Shutdown();
  EXPECT_TRUE(s.Wait().ok());
  auto after = viewer.GetView("default");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->members_size(), 0) << "Shutdown leaves the registry";
}

TEST_F(ShardServerTest, ShardsOfOnePoolRunInOneProcess) {
  auto a = StartShard(0);
  auto b = StartShard(1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->transport_address(), (*b)->transport_address());
  RegistryClient viewer(registry_address_);
  auto view = viewer.GetView("default");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->members_size(), 2);
  // The same shard twice: its lease is held, the join gives up after join_timeout.
  ShardServerOptions dup;
  dup.registry = registry_address_;
  dup.shard = 1;
  dup.join_timeout = absl::Milliseconds(300);
  auto c = ShardServer::Start(dup, InProcTransport::Create(fabric_));
  EXPECT_TRUE(absl::IsAlreadyExists(c.status())) << c.status();
}

TEST_F(ShardServerTest, LostLeaseEndsTheServerWhenAskedTo) {
  auto server = StartShard(0, [](ShardServerOptions* o) { o->exit_on_lost_lease = true; });
  ASSERT_TRUE(server.ok()) << server.status();
  auto members = registry_.service().registry().ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 1u);
  ASSERT_TRUE(registry_.service().registry().Leave((*members)[0].lease_id).ok());
  auto ended = (*server)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(ended.has_value()) << "the server did not notice its lease was gone";
  EXPECT_TRUE(absl::IsUnavailable(*ended)) << *ended;
  EXPECT_EQ(ended->message(), "lost registry lease");
}

// grpc.health.v1 Check of `service` at `address`: "SERVING", "NOT_SERVING",
// or the RPC's error.
std::string Health(const std::string& address, const std::string& service = "") {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = stub->Check(&ctx, request, &response);
  if (!s.ok()) return "error: " + s.error_message();
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? "SERVING"
                                                                             : "NOT_SERVING";
}

// Polls `condition` every 50 ms for up to `timeout`.
bool Eventually(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return condition();
}

// An evicted (or forgotten) lease is not the end: the server joins again,
// keeps its jobs, and stays ready.
TEST_F(ShardServerTest, LostLeaseRejoinsAndKeepsItsJobs) {
  auto server = StartShard(0);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    auto stub = v1::ShardServer::NewStub(MakeChannel((*server)->grpc_address()));
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    ASSERT_TRUE(stub->CreateJob(&ctx, DdpJob(), &resp).ok());
  }
  auto members = registry_.service().registry().ListMembers();
  ASSERT_TRUE(members.ok() && members->size() == 1u);
  const int64_t old_lease = (*members)[0].lease_id;
  ASSERT_TRUE(registry_.service().registry().Leave(old_lease).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto now = registry_.service().registry().ListMembers();
        return now.ok() && now->size() == 1u && (*now)[0].lease_id != old_lease;
      },
      absl::Seconds(10)))
      << "the server did not join again";
  EXPECT_FALSE((*server)->WaitFor(absl::Milliseconds(300)).has_value()) << "still running";
  EXPECT_TRUE(Eventually([&] { return (*server)->ready(); }, absl::Seconds(5)));
  auto stub = v1::ShardServer::NewStub(MakeChannel((*server)->grpc_address()));
  grpc::ClientContext ctx;
  v1::JobRef ref;
  ref.set_job("j");
  v1::ShardStats stats;
  EXPECT_TRUE(stub->GetStats(&ctx, ref, &stats).ok()) << "the job survived the re-join";
  (*server)->Shutdown();
}

// A server cut off long enough for a replacement to take its shard (a
// partition, a long stall) finds the shard held when it joins again: it
// stands down instead of waiting beside the replacement for ever.
TEST_F(ShardServerTest, LostLeaseToAReplacementStandsDown) {
  auto server = StartShard(0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto members = registry_.service().registry().ListMembers();
  ASSERT_TRUE(members.ok() && members->size() == 1u);
  v1::Member replacement = (*members)[0].member;
  replacement.set_pid(replacement.pid() + 1);
  ASSERT_TRUE(registry_.service().registry().Leave((*members)[0].lease_id).ok());
  auto joined = registry_.service().registry().Join(replacement, absl::Seconds(30));
  ASSERT_TRUE(joined.ok()) << joined.status();
  auto ended = (*server)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(ended.has_value()) << "the replaced server did not stand down";
  EXPECT_TRUE(absl::IsFailedPrecondition(*ended)) << *ended;
  EXPECT_NE(ended->message().find("standing down"), std::string::npos) << *ended;
  auto now = registry_.service().registry().ListMembers();
  ASSERT_TRUE(now.ok() && now->size() == 1u);
  EXPECT_EQ((*now)[0].lease_id, joined->lease_id) << "the replacement keeps the shard";
}

// Readiness tells the truth on the service port and the health-only port:
// SERVING once joined, NOT_SERVING while cut off from the registry (here:
// the registry process is gone), SERVING again once a new registry (a
// restarted memory registry, which forgot every lease) has it joined again.
// Liveness answers throughout.
TEST_F(ShardServerTest, ReadinessFollowsTheRegistryAcrossARestart) {
  auto server = StartShard(0, [](ShardServerOptions* o) { o->health_listen = "127.0.0.1:0"; });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string health = (*server)->health_address();
  ASSERT_FALSE(health.empty());
  EXPECT_EQ(Health(health), "SERVING");
  EXPECT_EQ(Health(health, "tessel.v1.ShardServer"), "SERVING");
  EXPECT_EQ(Health((*server)->grpc_address()), "SERVING");

  // The registry goes away.
  registry_.Stop(absl::ZeroDuration());
  EXPECT_TRUE(Eventually([&] { return Health(health) == "NOT_SERVING"; }, absl::Seconds(5)))
      << Health(health);
  EXPECT_EQ(Health(health, "liveness"), "SERVING");
  EXPECT_EQ(Health((*server)->grpc_address()), "NOT_SERVING");

  // A new registry on the same address: it knows no lease; the server joins.
  absl::Status restarted = registry_.Start();
  ASSERT_TRUE(restarted.ok()) << restarted;
  EXPECT_TRUE(Eventually(
      [&] {
        auto members = registry_.service().registry().ListMembers();
        return members.ok() && members->size() == 1u;
      },
      absl::Seconds(10)))
      << "the server did not join the restarted registry";
  EXPECT_TRUE(Eventually([&] { return Health(health) == "SERVING"; }, absl::Seconds(5)));
  EXPECT_FALSE((*server)->WaitFor(absl::Milliseconds(100)).has_value()) << "still running";
  (*server)->Shutdown();
}

// Pods of a deployment start in any order: a server whose registry is not
// listening yet keeps trying (up to join_timeout), answers liveness and says
// NOT_SERVING meanwhile, and joins once the registry is up; with none
// within join_timeout, Start fails naming the registry.
TEST_F(ShardServerTest, AServerStartedBeforeItsRegistryWaitsAndJoins) {
  registry_.Stop(absl::ZeroDuration());
  std::thread later([&] {
    absl::SleepFor(absl::Seconds(1));
    absl::Status restarted = registry_.Start();
    EXPECT_TRUE(restarted.ok()) << restarted;
  });
  const absl::Time t0 = absl::Now();
  auto server = StartShard(0, [](ShardServerOptions* o) { o->join_timeout = absl::Seconds(20); });
  later.join();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(900)) << "joined before the registry was up?";
  auto members = registry_.service().registry().ListMembers();
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), 1u);
  EXPECT_EQ(Health((*server)->grpc_address()), "SERVING");
  (*server)->Shutdown();

  // Nobody at the address within join_timeout: Start fails and says where.
  registry_.Stop(absl::ZeroDuration());
  auto alone = StartShard(1, [](ShardServerOptions* o) { o->join_timeout = absl::Seconds(1); });
  ASSERT_FALSE(alone.ok());
  EXPECT_TRUE(absl::IsUnavailable(alone.status()) || absl::IsDeadlineExceeded(alone.status()))
      << alone.status();
}

TEST_F(ShardServerTest, RefusesBadOptions) {
  ShardServerOptions options;
  options.registry = registry_address_;
  EXPECT_TRUE(absl::IsInvalidArgument(
      ShardServer::Start(options, InProcTransport::Create(fabric_)).status()));  // no shard
  options.shard = 0;
  options.registry.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(
      ShardServer::Start(options, InProcTransport::Create(fabric_)).status()));
  options.registry = registry_address_;
  EXPECT_TRUE(absl::IsInvalidArgument(ShardServer::Start(options, nullptr).status()));
}

}  // namespace
}  // namespace tessel
