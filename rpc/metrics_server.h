// The HTTP side of a long-running process: Prometheus's /metrics (the text
// exposition of a metrics::Registry), served by cpp-httplib on its own
// threads. Off unless --metrics_address is set (StartMetricsServerFromFlags).
// The registry adds its status page here (AddPage).
//
//   GET /metrics  text/plain; version=0.0.4   every family of the registry
//   GET /         a short index of the pages
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(auto http, tessel::MetricsServer::Start("0.0.0.0:9090"));
//   // ... http->address() is "0.0.0.0:9090"; destroying it stops serving.
#ifndef TESSEL_RPC_METRICS_SERVER_H_
#define TESSEL_RPC_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "runtime/metrics.h"

ABSL_DECLARE_FLAG(std::string, metrics_address);

namespace httplib {
class Server;
}

namespace tessel {

// A page served beside /metrics (the registry's status page): `body()` is
// called on the server's threads for each request.
struct HttpPage {
  std::string path;
  std::string content_type;
  std::function<std::string()> body;
};

class MetricsServer {
 public:
  // Listens on `address` (HOST:PORT; port 0 picks a free one), serving
  // `pages` too (fixed before the first request: cpp-httplib's routes may
  // not change while it serves). InvalidArgument for a malformed address,
  // Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, metrics::Registry* registry = &metrics::Default(),
      std::vector<HttpPage> pages = {});
  ~MetricsServer();  // stops serving and joins the server's threads

  // HOST:PORT with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  std::thread thread_;
  std::vector<std::string> pages_;
};

// Starts the server --metrics_address names (with `pages`), logging
// "metrics at http://ADDRESS/metrics"; null (and no error) when the flag is
// empty.
absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(
    std::vector<HttpPage> pages = {});

}  // namespace tessel

#endif  // TESSEL_RPC_METRICS_SERVER_H_
