#include "rpc/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace tessel {
namespace {

TEST(MetricsServerTest, ServesTheRegistryAtMetricsOverHttp) {
  metrics::Registry registry;
  metrics::Counter* c =
      registry.AddCounter("t_requests_total", "requests", {"method"}).GetCounter({"Get"});
  auto server = MetricsServer::Start("127.0.0.1:0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  ASSERT_GT(port, 0);
  c->Add(7);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(res->body.find("t_requests_total{method=\"Get\"} 7\n"), std::string::npos);
  EXPECT_NE(res->body.find("tessel_build_info{version=\"tessel "), std::string::npos);
  EXPECT_NE(res->body.find("process_start_time_seconds "), std::string::npos);
  EXPECT_EQ(client.Get("/nope")->status, 404);
}

TEST(MetricsServerTest, BadOrTakenAddressesAreRefused) {
  for (const char* bad : {"", "9090", ":9090", "host:port", "127.0.0.1:70000"}) {
    auto s = MetricsServer::Start(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto first = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start((*first)->address());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("cannot serve metrics on"), std::string::npos);
}

TEST(MetricsServerTest, PagesAreServedAndIndexed) {
  metrics::Registry registry;
  auto server =
      MetricsServer::Start("127.0.0.1:0", &registry,
                           {{"/status", "text/html", [] { return std::string("<p>ok</p>"); }}});
  ASSERT_TRUE(server.ok());
  const std::string address = (*server)->address();
  httplib::Client client("127.0.0.1", std::stoi(address.substr(address.rfind(':') + 1)));
  EXPECT_EQ(client.Get("/status")->body, "<p>ok</p>");
  EXPECT_NE(client.Get("/")->body.find("/status"), std::string::npos);
}

}  // namespace
}  // namespace tessel
