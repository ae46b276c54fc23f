// The registry's status page, served beside /metrics (--metrics_address):
//
//   GET /status       an HTML page that refreshes itself every 2 s
//   GET /status.json  what it shows: members by group, each job on the
//                     pools' shard servers (strategy, workers, step, steps per
//                     second, epoch, newest checkpoint and its age) and its
//                     loss curve (rank 0's Worker::ReportLoss, with heartbeats)
//
// Jobs and checkpoints come from the shard servers (ListJobs and
// ListCheckpoints, 1 s deadline, anonymous reads or the registry's own TLS
// credentials); members and loss from the registry itself. The JSON is
// computed at most once a second, however many browsers poll.
#ifndef TESSEL_REGISTRY_STATUS_PAGE_H_
#define TESSEL_REGISTRY_STATUS_PAGE_H_

#include <deque>
#include <map>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "registry/registry_service.h"
#include "rpc/metrics_server.h"
#include "rpc/tls.h"

namespace tessel {

class StatusPage {
 public:
  StatusPage(RegistryService* service, ClientCredentials credentials);
  // The registry's gRPC address, once it listens (shown on the page).
  void SetAddress(const std::string& address);
  // How the registry authenticates its callers (SecurityPosture's
  // description, rpc/auth_options.h): "security" in /status.json, and a
  // warning across the page when it is "insecure".
  void SetSecurity(const std::string& security);

  std::string Json();
  static std::string Html();
  // /status and /status.json, for MetricsServer::Start.
  std::vector<HttpPage> Pages();

 private:
  std::string Compute() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RegistryService* const service_;
  const ClientCredentials credentials_;
  absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::string security_ ABSL_GUARDED_BY(mu_);
  absl::Time computed_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string cached_ ABSL_GUARDED_BY(mu_);
  // Per job, (time, step) as polled, for steps per second.
  std::map<std::string, std::deque<std::pair<absl::Time, int64_t>>> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_STATUS_PAGE_H_
