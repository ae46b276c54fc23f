#include "rpc/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "absl/flags/flag.h"

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
  for (const char* bad : {"", "9090", "host:port", "127.0.0.1:70000", ":x"}) {
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

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

// ":PORT" listens on loopback only, and loopback needs no token.
TEST(MetricsAccessTest, NoHostMeansLoopback) {
  metrics::Registry registry;
  auto server = MetricsServer::Start(":0", &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address().rfind("127.0.0.1:", 0), 0u) << (*server)->address();
  httplib::Client client("127.0.0.1", PortOf((*server)->address()));
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.8.9.10"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("::"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("tessel-registry"));
  EXPECT_FALSE(IsLoopbackHost(""));
}

// A non-loopback listener with nothing to check is refused at start, and
// says what to do.
TEST(MetricsAccessTest, WildcardWithoutTokenOrOpenIsRefused) {
  auto s = MetricsServer::Start("0.0.0.0:0");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(s.status().message().find("--metrics_token_file"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("--metrics_open"), std::string::npos) << s.status();
  EXPECT_EQ(
      MetricsServer::Start("0.0.0.0:0", &metrics::Default(), {}, {.tokens = {""}}).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

// Over real HTTP, on the wildcard address (reached through loopback): every
// page needs a configured bearer token.
TEST(MetricsAccessTest, WildcardNeedsAReaderToken) {
  metrics::Registry registry;
  registry.AddCounter("t_total", "t", {}).GetCounter({})->Add(1);
  const std::string reader = "tessel-reader-token-0123", admin = "tessel-admin-token-01234";
  auto server = MetricsServer::Start("0.0.0.0:0", &registry,
                                     {{"/status.json", "application/json", [] { return "{}"; }}},
                                     {.tokens = {admin, reader}});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", PortOf((*server)->address()));
  for (const char* path : {"/metrics", "/status.json", "/"}) {
    auto res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer realm=\"tessel\"");
    EXPECT_EQ(res->body.find("t_total"), std::string::npos);
    res = client.Get(path, {{"Authorization", "Bearer not-a-token-at-all-012"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << path;
    res = client.Get(path, {{"Authorization", reader}});  // no "Bearer "
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401) << path;
    res = client.Get(path, {{"Authorization", "Bearer " + reader}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << path;
    res = client.Get(path, {{"Authorization", "Bearer " + admin}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << path;
  }
  EXPECT_NE(client.Get("/metrics", {{"Authorization", "Bearer " + reader}})->body.find("t_total 1"),
            std::string::npos);
}

// --metrics_open: the wildcard address answers without a token.
TEST(MetricsAccessTest, OpenServesEveryone) {
  metrics::Registry registry;
  auto server = MetricsServer::Start("0.0.0.0:0", &registry, {}, {.tokens = {}, .open = true});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", PortOf((*server)->address()));
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// The flags: reader tokens from --metrics_token_file (a secret file) and the
// service's own tokens.
TEST(MetricsAccessTest, AccessFromFlags) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file = std::string(tmp != nullptr ? tmp : "/tmp") + "/metrics.tokens";
  std::ofstream(file) << "# prometheus\ntessel-reader-token-0123\n";
  ASSERT_EQ(chmod(file.c_str(), 0600), 0);
  absl::SetFlag(&FLAGS_metrics_token_file, file);
  EXPECT_EQ(MetricsAccessFlags(), std::vector<std::string>{"--metrics_token_file=" + file});
  auto access = HttpAccessFromFlags({"tessel-admin-token-01234"});
  ASSERT_TRUE(access.ok()) << access.status();
  EXPECT_EQ(access->tokens,
            (std::vector<std::string>{"tessel-admin-token-01234", "tessel-reader-token-0123"}));
  EXPECT_FALSE(access->open);
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  access = HttpAccessFromFlags();
  EXPECT_EQ(access.status().code(), absl::StatusCode::kPermissionDenied) << access.status();
  absl::SetFlag(&FLAGS_metrics_token_file, "");
  absl::SetFlag(&FLAGS_metrics_open, true);
  EXPECT_EQ(MetricsAccessFlags(), std::vector<std::string>{"--metrics_open"});
  access = HttpAccessFromFlags();
  ASSERT_TRUE(access.ok());
  EXPECT_TRUE(access->open);
  EXPECT_TRUE(access->tokens.empty());
  absl::SetFlag(&FLAGS_metrics_open, false);
}

}  // namespace
}  // namespace tessel
