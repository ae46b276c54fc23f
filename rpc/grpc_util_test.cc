#include "rpc/grpc_util.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/health.h"

namespace tessel {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

TEST(AdvertiseHostTest, ExplicitListenHostIsKept) {
  unsetenv("POD_IP");
  EXPECT_EQ(*AdvertiseHost("10.1.2.3:7000", ""), "10.1.2.3");
  EXPECT_EQ(*AdvertiseHost("127.0.0.1:0", ""), "127.0.0.1");
  EXPECT_EQ(*AdvertiseHost("[fd00::1]:7000", ""), "[fd00::1]");
}

TEST(AdvertiseHostTest, AdvertiseFlagWins) {
  setenv("POD_IP", "10.9.9.9", 1);
  EXPECT_EQ(*AdvertiseHost("0.0.0.0:7000", "tessel-server-0.tessel-server"),
            "tessel-server-0.tessel-server");
  EXPECT_EQ(*AdvertiseHost("127.0.0.1:7000", "192.0.2.7"), "192.0.2.7");
  unsetenv("POD_IP");
}

TEST(AdvertiseHostTest, WildcardTakesPodIpThenAnInterfaceNeverLoopback) {
  setenv("POD_IP", "10.244.1.17", 1);
  EXPECT_EQ(*AdvertiseHost("0.0.0.0:7100", ""), "10.244.1.17");
  EXPECT_EQ(*AdvertiseHost(":7100", ""), "10.244.1.17");
  EXPECT_EQ(*AdvertiseHost("[::]:7100", ""), "10.244.1.17");
  unsetenv("POD_IP");
  auto host = AdvertiseHost("0.0.0.0:7100", "");
  if (host.ok()) {
    EXPECT_NE(*host, "127.0.0.1");
    EXPECT_NE(*host, "0.0.0.0");
  } else {
    // A host with loopback only: the error says what to pass.
    EXPECT_EQ(host.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(host.status().message().find("--advertise_address"), std::string::npos);
  }
}

grpc::Status Check(const std::string& address, const std::string& service,
                   HealthCheckResponse::ServingStatus* status) {
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(address));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(5));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status s = stub->Check(&ctx, request, &response);
  *status = response.status();
  return s;
}

TEST(HealthReporterTest, ReadinessAndLivenessOnServicePortAndHealthPort) {
  std::string address;
  v1::Registry::Service placeholder;  // a server needs one service of its own
  auto server = StartGrpcServer("127.0.0.1:0", {&placeholder}, &address);
  ASSERT_TRUE(server.ok()) << server.status();
  HealthReporter health({"tessel.v1.ShardServer"});
  ASSERT_TRUE(health.Listen("127.0.0.1:0").ok());
  health.Attach(server->get());
  ASSERT_FALSE(health.health_address().empty());

  for (const std::string& where : {address, health.health_address()}) {
    HealthCheckResponse::ServingStatus status;
    ASSERT_TRUE(Check(where, "", &status).ok());
    EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING) << where << ": starts not ready";
    ASSERT_TRUE(Check(where, "liveness", &status).ok());
    EXPECT_EQ(status, HealthCheckResponse::SERVING) << where;
  }
  health.SetReady(true, "joined");
  for (const std::string& where : {address, health.health_address()}) {
    HealthCheckResponse::ServingStatus status;
    ASSERT_TRUE(Check(where, "", &status).ok());
    EXPECT_EQ(status, HealthCheckResponse::SERVING) << where;
    ASSERT_TRUE(Check(where, "tessel.v1.ShardServer", &status).ok());
    EXPECT_EQ(status, HealthCheckResponse::SERVING) << where;
    EXPECT_EQ(Check(where, "no.such.Service", &status).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  health.SetReady(false, "draining");
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(Check(health.health_address(), "", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(Check(health.health_address(), "liveness", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);

  health.Detach(server->get());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace tessel
