// The HTTP side of a long-running process: Prometheus's /metrics (the text
// exposition of a metrics::Registry), served by cpp-httplib on its own
// threads. Off unless --metrics_address is set (StartMetricsServerFromFlags).
// The registry adds its status page here (AddPage).
//
//   GET /metrics  text/plain; version=0.0.4   every family of the registry
//   GET /         a short index of the pages
//
// Private by default (HttpAccess): an address without a host (":9090")
// listens on loopback (127.0.0.1), where anyone on the host may read. On
// any other address every request needs `authorization: Bearer TOKEN` with
// one of the accepted tokens (the service's admin token, the reader tokens
// of --metrics_token_file: what Prometheus sends with `authorization:
// credentials_file`); without any, 401. A non-loopback address with no
// token to accept is refused at start, unless --metrics_open serves the
// pages to anyone who can reach the port (logged as a warning).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(auto http, tessel::MetricsServer::Start(
//       "0.0.0.0:9090", &metrics::Default(), {}, {.tokens = {reader_token}}));
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
ABSL_DECLARE_FLAG(std::string, metrics_token_file);
ABSL_DECLARE_FLAG(bool, metrics_open);

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

// Who may read the pages of a server on a non-loopback address.
struct HttpAccess {
  std::vector<std::string> tokens;  // bearer tokens accepted (admin, reader)
  bool open = false;                // --metrics_open: anyone, no token
};

// True for "localhost", 127.0.0.0/8 and ::1.
bool IsLoopbackHost(const std::string& host);

class MetricsServer {
 public:
  // Listens on `address` (HOST:PORT, or :PORT for loopback; port 0 picks a
  // free one), serving `pages` too (fixed before the first request:
  // cpp-httplib's routes may not change while it serves), to whom `access`
  // lets in (above). InvalidArgument for a malformed address,
  // FailedPrecondition for a non-loopback address with neither a token nor
  // `access.open`, Unavailable when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, metrics::Registry* registry = &metrics::Default(),
      std::vector<HttpPage> pages = {}, HttpAccess access = {});
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

// The access the flags give: --metrics_open (env TESSEL_METRICS_OPEN=1),
// the reader tokens of --metrics_token_file (env TESSEL_METRICS_TOKEN_FILE,
// read as a secret file: rpc/secret_file.h), and `service_tokens` (the
// admin token of tessel-server and tessel-registry).
absl::StatusOr<HttpAccess> HttpAccessFromFlags(std::vector<std::string> service_tokens = {});

// --metrics_open and --metrics_token_file as they were given, to forward to
// the child processes a launcher starts with a --metrics_address of its own
// host (empty when neither is set).
std::vector<std::string> MetricsAccessFlags();

// Starts the server --metrics_address names (with `pages`, HttpAccessFromFlags
// (service_tokens)), logging "metrics at http://ADDRESS/metrics"; null (and
// no error) when the flag is empty.
absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(
    std::vector<HttpPage> pages = {}, std::vector<std::string> service_tokens = {});

}  // namespace tessel

#endif  // TESSEL_RPC_METRICS_SERVER_H_
