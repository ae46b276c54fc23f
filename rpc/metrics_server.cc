#include "rpc/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "runtime/version.h"

ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free port; "
          "the address is logged); empty: off");

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

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    metrics::Registry* registry,
                                                                    std::vector<HttpPage> pages) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", address, "\" is not HOST:PORT (e.g. 0.0.0.0:9090)"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
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
  s->address_ = absl::StrCat(address.substr(0, colon), ":", bound);
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

absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(
    std::vector<HttpPage> pages) {
  const std::string address = absl::GetFlag(FLAGS_metrics_address);
  if (address.empty()) return std::unique_ptr<MetricsServer>();
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
                          MetricsServer::Start(address, &metrics::Default(), std::move(pages)));
  TESSEL_LOG(INFO) << "metrics at http://" << server->address() << "/metrics";
  return server;
}

}  // namespace tessel
