#include "rpc/shard_fleet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// GetStats answers job "missing" with NOT_FOUND; otherwise it echoes the
// authorization header it saw in `job` and the deadline's distance in
// `step` (milliseconds; -1 when the call had none).
class EchoShard final : public v1::ShardServer::Service {
 public:
  grpc::Status GetStats(grpc::ServerContext* ctx, const v1::JobRef* ref,
                        v1::ShardStats* stats) override {
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back(ref->job());
    }
    if (ref->job() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 'missing'");
    }
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end()) {
      stats->set_job(std::string(it->second.data(), it->second.size()));
    }
    const auto deadline = ctx->deadline();
    stats->set_step(deadline == std::chrono::system_clock::time_point::max()
                        ? -1
                        : absl::ToInt64Milliseconds(absl::FromChrono(deadline) - absl::Now()));
    return grpc::Status::OK;
  }

  std::vector<std::string> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
};

// The deadline a call carried, as echoed in `step`: a little under
// `timeout` (time passes) or a little over (gRPC rounds the timeout it puts
// on the wire up).
void ExpectDeadline(const v1::ShardStats& stats, absl::Duration timeout) {
  const int64_t ms = absl::ToInt64Milliseconds(timeout);
  EXPECT_GT(stats.step(), ms - 2000) << "no deadline, or not the one asked for";
  EXPECT_LE(stats.step(), ms + 100);
}

// The call most tests make: GetStats through ShardFleet::Call.
absl::Status GetStats(const ShardFleet& fleet, int shard, const v1::JobRef& ref,
                      v1::ShardStats* stats, absl::Duration timeout = absl::ZeroDuration()) {
  return fleet.Call(shard, &v1::ShardServer::Stub::GetStats, ref, stats, "GetStats", timeout);
}

class ShardFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = StartGrpcServer("127.0.0.1:0", {&service_}, &address_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  static v1::JobRef Job(const std::string& name) {
    v1::JobRef ref;
    ref.set_job(name);
    return ref;
  }

  EchoShard service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ShardFleetTest, SendsTheTokenAndADeadline) {
  ShardFleet fleet({.token = "tessel-test-token-0123456789", .timeout = absl::Seconds(7)});
  fleet.Connect(0, address_);
  v1::ShardStats stats;
  ASSERT_TRUE(GetStats(fleet, 0, Job("mlp"), &stats).ok());
  EXPECT_EQ(stats.job(), "Bearer tessel-test-token-0123456789");
  ExpectDeadline(stats, absl::Seconds(7));  // the fleet's default

  // A per-call timeout overrides the fleet's.
  ASSERT_TRUE(GetStats(fleet, 0, Job("mlp"), &stats, absl::Seconds(2)).ok());
  ExpectDeadline(stats, absl::Seconds(2));
}

TEST_F(ShardFleetTest, NoTokenNoHeader) {
  ShardFleet fleet;
  fleet.Connect(0, address_);
  v1::ShardStats stats;
  ASSERT_TRUE(GetStats(fleet, 0, Job("mlp"), &stats).ok());
  EXPECT_EQ(stats.job(), "");
  ExpectDeadline(stats, kRpcTimeout);
}

TEST_F(ShardFleetTest, ContextCarriesTokenAndDeadlineForRawStubs) {
  ShardFleet fleet({.token = "tessel-test-token-0123456789"});
  fleet.Connect(3, address_);
  ASSERT_NE(fleet.Stub(3), nullptr);
  auto ctx = fleet.Context(absl::Seconds(3));
  v1::ShardStats stats;
  ASSERT_TRUE(fleet.Stub(3)->GetStats(ctx.get(), Job("mlp"), &stats).ok());
  EXPECT_EQ(stats.job(), "Bearer tessel-test-token-0123456789");
  ExpectDeadline(stats, absl::Seconds(3));
}

TEST_F(ShardFleetTest, ErrorsNameCallShardAndAddressAndKeepTheCode) {
  ShardFleet fleet;
  fleet.Connect(2, address_);
  v1::ShardStats stats;
  absl::Status s = GetStats(fleet, 2, Job("missing"), &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), absl::StrCat("GetStats on shard 2 (", address_, "): no job 'missing'"));

  s = fleet.CallWithPrefix(2, &v1::ShardServer::Stub::GetStats, Job("missing"), &stats, "shard 2");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "shard 2: no job 'missing'");
}

TEST_F(ShardFleetTest, UnreachableShardIsUnavailableAndNamed) {
  ShardFleet fleet({.timeout = absl::Seconds(2)});
  fleet.Connect(0, "127.0.0.1:1");
  v1::ShardStats stats;
  absl::Status s = GetStats(fleet, 0, Job("mlp"), &stats);
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded)
      << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("GetStats on shard 0 (127.0.0.1:1)"));
}

TEST_F(ShardFleetTest, UnknownShardIsNotFound) {
  ShardFleet fleet;
  fleet.Connect(0, address_);
  EXPECT_FALSE(fleet.has(1));
  EXPECT_EQ(fleet.Stub(1), nullptr);
  EXPECT_EQ(fleet.address(1), "");
  v1::ShardStats stats;
  absl::Status s = GetStats(fleet, 1, Job("mlp"), &stats);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("GetStats: shard 1 is not connected"));
  EXPECT_TRUE(service_.calls().empty());
}

TEST_F(ShardFleetTest, ForEachStopsAtTheFirstFailure) {
  ShardFleet fleet;
  for (int shard : {0, 1, 2}) fleet.Connect(shard, address_);
  std::vector<int> called;
  absl::Status s = fleet.ForEach([&](int shard) {
    called.push_back(shard);
    v1::ShardStats stats;
    return GetStats(fleet, shard, Job(shard == 1 ? "missing" : "mlp"), &stats);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("on shard 1 ("));
  EXPECT_THAT(called, ElementsAre(0, 1));
  EXPECT_THAT(service_.calls(), ElementsAre("mlp", "missing"));
  EXPECT_TRUE(fleet.ForEach([](int) { return absl::OkStatus(); }).ok());
}

TEST_F(ShardFleetTest, ForAllCallsEveryShardAndReturnsTheFirstFailure) {
  ShardFleet fleet;
  for (int shard : {0, 1, 2, 3}) fleet.Connect(shard, address_);
  std::vector<int> called;
  absl::Status s = fleet.ForAll([&](int shard) {
    called.push_back(shard);
    if (shard == 1) return absl::InternalError("first");
    if (shard == 2) return absl::UnavailableError("second");
    return absl::OkStatus();
  });
  EXPECT_EQ(s, absl::InternalError("first"));
  EXPECT_THAT(called, ElementsAre(0, 1, 2, 3));
}

TEST(ShardFleetViewTest, ConnectViewTakesServersByRank) {
  v1::View view;
  auto add = [&](v1::Role role, int rank, const std::string& address) {
    v1::Member* m = view.add_members();
    m->set_role(role);
    m->set_rank(rank);
    m->set_grpc_address(address);
  };
  add(v1::ROLE_SERVER, 2, "127.0.0.1:7002");
  add(v1::ROLE_WORKER, 1, "127.0.0.1:8001");
  add(v1::ROLE_SERVER, 0, "127.0.0.1:7000");
  ShardFleet fleet;
  EXPECT_EQ(fleet.ConnectView(view), 2);
  EXPECT_EQ(fleet.size(), 2);
  EXPECT_THAT(fleet.shards(), ElementsAre(0, 2));
  EXPECT_EQ(fleet.address(0), "127.0.0.1:7000");
  EXPECT_EQ(fleet.address(2), "127.0.0.1:7002");
  EXPECT_FALSE(fleet.has(1));

  // An unchanged address keeps its channel; a new one replaces it.
  v1::ShardServer::Stub* stub = fleet.Stub(0);
  fleet.ConnectView(view);
  EXPECT_EQ(fleet.Stub(0), stub);
  fleet.Connect(2, "127.0.0.1:7012");
  EXPECT_EQ(fleet.address(2), "127.0.0.1:7012");
  EXPECT_NE(fleet.Stub(2), nullptr);
}

}  // namespace
}  // namespace tessel
