// LocalCluster: a real Tessel cluster on this machine for launchers and
// integration tests: the registry embedded in the calling process, shard
// servers and workers as separate processes on loopback. Everything it
// started is stopped by Stop() or the destructor.
//
// Example:
//   LocalCluster cluster({.servers = 2, .run_dir = MakeRunDir("demo")});
//   RETURN_IF_ERROR(cluster.Start());
//   RETURN_IF_ERROR(cluster.RunWorkers(2, worker_args, absl::Minutes(5), &g_stop));
#ifndef TESSEL_TESTING_LOCAL_CLUSTER_H_
#define TESSEL_TESTING_LOCAL_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/lease.h"
#include "registry/registry_service.h"
#include "registry/status_page.h"
#include "rpc/metrics_server.h"
#include "rpc/tls.h"
#include "testing/launch_credentials.h"
#include "testing/process.h"

namespace tessel {

struct ClusterOptions {
  int servers = 2;
  std::string pool = "default";
  std::string run_dir;
  // Every process of a LocalCluster is on this host, so shared memory only:
  // measured 3.0 GB/s here versus 1.0-1.8 GB/s with UCX's default set, where
  // UCX puts active messages on tcp lanes (docs/architecture.md, Data path).
  std::string ucx_tls = "posix,sysv,self";
  std::vector<std::string> server_args;  // extra flags for every server
  absl::Duration lease_ttl = kDefaultLeaseTtl;
  // Mutual TLS for the embedded registry, and forwarded (--tls_*) to every
  // server and worker started; empty = plaintext.
  TlsOptions tls;
  // Every process without credentials (--insecure). Otherwise (the default)
  // Start() makes this launch's tokens (testing/launch_credentials.h): the
  // registry and the servers require them, the servers then authenticate
  // every data-path frame, and the workers started present the worker token.
  bool insecure = false;
};

class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions options);
  ~LocalCluster();

  // Starts the registry and the servers; returns once every server has
  // registered (or one died: the status says which and why).
  absl::Status Start();
  // Starts `workers` worker processes (tessel-train with `args` plus
  // --registry, --rank, --world, --servers) and waits for all to exit 0.
  // Worker 0's stdout is shown when `show_rank0` is set.
  absl::Status RunWorkers(int workers, const std::vector<std::string>& args, absl::Duration timeout,
                          const volatile int* stop_requested, bool show_rank0 = true);
  void Stop();

  const std::string& registry_address() const { return registry_address_; }
  // The embedded registry's status page (/status, /status.json; after
  // Start), to serve beside /metrics (registry/status_page.h).
  absl::StatusOr<std::vector<HttpPage>> StatusPages();
  const std::string& run_dir() const { return options_.run_dir; }
  const TlsOptions& tls() const { return options_.tls; }
  // This launch's tokens (after Start; nullptr with `insecure`).
  const LaunchCredentials* credentials() const { return credentials_.get(); }
  // The flags a worker process started by someone else (tessel-launch's)
  // needs to present its credential: {"--token_file=..."} or none.
  std::vector<std::string> WorkerCredentialFlags() const;
  // The worker token itself, for a Worker in this process
  // (WorkerOptions::token); "" with `insecure`.
  std::string WorkerToken() const;
  ProcessGroup& processes() { return processes_; }

 private:
  ClusterOptions options_;
  std::unique_ptr<LaunchCredentials> credentials_;
  std::unique_ptr<RegistryService> registry_;
  std::unique_ptr<grpc::Server> registry_server_;
  std::unique_ptr<StatusPage> status_page_;
  std::string registry_address_;
  ProcessGroup processes_;
};

}  // namespace tessel

#endif  // TESSEL_TESTING_LOCAL_CLUSTER_H_
