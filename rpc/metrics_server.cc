#include "rpc/metrics_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"
#include "rpc/token_files.h"
#include "runtime/log.h"
#include "runtime/version.h"

ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus metrics (and the registry's status page) at "
          "http://HOST:PORT/metrics (port 0 picks a free port; the address is logged); :PORT "
          "listens on loopback only. On any other host every request needs a bearer token: the "
          "admin token (--admin_token_file) or a reader token (--metrics_token_file), unless "
          "--metrics_open. Empty: off");
ABSL_FLAG(std::string, metrics_token_file, "",
          "file of reader tokens (one per line, owner-only like every token file) that may read "
          "/metrics and the status pages on a non-loopback --metrics_address, e.g. the one "
          "Prometheus sends (authorization: credentials_file); env TESSEL_METRICS_TOKEN_FILE");
ABSL_FLAG(bool, metrics_open, false,
          "serve /metrics and the status pages on a non-loopback --metrics_address to anyone who "
          "can reach it, without a token (they name jobs, hosts and members); env "
          "TESSEL_METRICS_OPEN=1");

namespace tessel {
namespace {

// tessel_build_info{version}=1 and the process's start time, in every process.
void AddProcessMetrics(metrics::Registry* registry) {
  static const double start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  registry
      ->AddGauge("tessel_build_info", "always 1; the label carries Tessel's version", {"version"})
      .GetGauge({kVersion})
      ->Set(1);
  registry
      ->AddGauge("process_start_time_seconds", "start time of the process since the Unix epoch", {})
      .GetGauge({})
      ->Set(start);
}

// True when the request carries one of `tokens` as its bearer token. Every
// token is compared, in constant time each.
bool Authorized(const httplib::Request& req, const std::vector<std::string>& tokens) {
  const std::string value = req.get_header_value("Authorization");
  absl::string_view header = value;
  if (!absl::ConsumePrefix(&header, "Bearer ")) return false;
  bool match = false;
  for (const std::string& t : tokens) match = ConstantTimeEquals(header, t) || match;
  return match;
}

std::string FlagOrEnv(std::string flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    metrics::Registry* registry,
                                                                    std::vector<HttpPage> pages,
                                                                    HttpAccess access) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address \"", address, "\" is not HOST:PORT or :PORT (e.g. 127.0.0.1:9090)"));
  }
  const std::string shown_host = colon == 0 ? "127.0.0.1" : address.substr(0, colon);
  std::string host = shown_host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const bool loopback = IsLoopbackHost(host);
  access.tokens.erase(std::remove(access.tokens.begin(), access.tokens.end(), std::string()),
                      access.tokens.end());
  if (!loopback && !access.open && access.tokens.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--metrics_address=", address,
        " is not a loopback address, and its pages (job names, hosts, members) would be "
        "open to anyone who can reach it: give a token to require (--metrics_token_file=FILE "
        "of reader tokens, or the service's --admin_token_file), listen on loopback (:PORT or "
        "127.0.0.1:PORT), or pass --metrics_open to serve them without one"));
  }
  const bool require_token = !loopback && !access.open;
  if (!loopback && access.open) {
    TESSEL_LOG(WARNING) << "--metrics_open: /metrics and the status pages on " << address
                        << " answer anyone who can reach that address, without a token; they "
                           "name jobs, hosts and members. Use --metrics_token_file instead "
                           "where the network is not trusted";
  }
  AddProcessMetrics(registry);
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->server_ = std::make_unique<httplib::Server>();
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let
  // a second process share a taken port instead of being refused.
  s->server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->server_->set_read_timeout(5);
  s->server_->set_write_timeout(5);
  s->server_->set_payload_max_length(1 << 16);
  if (require_token) {
    s->server_->set_pre_routing_handler(
        [tokens = std::move(access.tokens)](const httplib::Request& req, httplib::Response& res) {
          if (Authorized(req, tokens)) return httplib::Server::HandlerResponse::Unhandled;
          res.status = 401;
          res.set_header("WWW-Authenticate", "Bearer realm=\"tessel\"");
          res.set_content(
              "401: this page needs a bearer token (authorization: Bearer TOKEN): the "
              "service's admin token or a reader token of its --metrics_token_file\n",
              "text/plain; charset=utf-8");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
  s->server_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Expose(), "text/plain; version=0.0.4; charset=utf-8");
  });
  MetricsServer* self = s.get();
  s->server_->Get("/", [self](const httplib::Request&, httplib::Response& res) {
    std::string body = absl::StrCat(kVersion, "\n\n/metrics  Prometheus metrics\n");
    for (const std::string& p : self->pages_) absl::StrAppend(&body, p, "\n");
    res.set_content(body, "text/plain; charset=utf-8");
  });
  for (HttpPage& page : pages) {
    s->pages_.push_back(page.path);
    s->server_->Get(page.path, [type = page.content_type, body = std::move(page.body)](
                                   const httplib::Request&, httplib::Response& res) {
      res.set_content(body(), type);
    });
  }
  const int bound = port == 0 ? s->server_->bind_to_any_port(host)
                              : (s->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, " (address in use or not permitted?)"));
  }
  s->address_ = absl::StrCat(shown_host, ":", bound);
  s->thread_ = std::thread([server = s->server_.get()] { server->listen_after_bind(); });
  // httplib's stop() does nothing before its listen loop has begun, and that
  // loop would then never end: wait for it, so that destroying the server
  // right away still stops it.
  for (int i = 0; i < 5000 && !s->server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return s;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<HttpAccess> HttpAccessFromFlags(std::vector<std::string> service_tokens) {
  HttpAccess access;
  const std::string open = FlagOrEnv("", "TESSEL_METRICS_OPEN");
  access.open = absl::GetFlag(FLAGS_metrics_open) || open == "1" || open == "true";
  access.tokens = std::move(service_tokens);
  const std::string file =
      FlagOrEnv(absl::GetFlag(FLAGS_metrics_token_file), "TESSEL_METRICS_TOKEN_FILE");
  if (!file.empty()) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<RoleToken> readers,
                            ReadRoleTokenFile("--metrics_token_file", file, Role::kReader));
    for (RoleToken& t : readers) access.tokens.push_back(std::move(t.token));
  }
  return access;
}

std::vector<std::string> MetricsAccessFlags() {
  std::vector<std::string> out;
  if (absl::GetFlag(FLAGS_metrics_open)) out.push_back("--metrics_open");
  const std::string file = absl::GetFlag(FLAGS_metrics_token_file);
  if (!file.empty()) out.push_back("--metrics_token_file=" + file);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(
    std::vector<HttpPage> pages, std::vector<std::string> service_tokens) {
  const std::string address = absl::GetFlag(FLAGS_metrics_address);
  if (address.empty()) return std::unique_ptr<MetricsServer>();
  TESSEL_ASSIGN_OR_RETURN(HttpAccess access, HttpAccessFromFlags(std::move(service_tokens)));
  TESSEL_ASSIGN_OR_RETURN(
      std::unique_ptr<MetricsServer> server,
      MetricsServer::Start(address, &metrics::Default(), std::move(pages), std::move(access)));
  TESSEL_LOG(INFO) << "metrics at http://" << server->address() << "/metrics";
  return server;
}

}  // namespace tessel
