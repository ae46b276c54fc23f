// grpc.health.v1 that tells the truth, for Kubernetes' native gRPC probes
// and the registry's health checks.
//
// Example:
//   HealthReporter health({"tessel.v1.ShardServer"});
//   TESSEL_RETURN_IF_ERROR(health.Listen("0.0.0.0:7101"));  // plaintext, probes only
//   health.Attach(grpc_server.get());                         // the service port too
//   health.SetReady(true, "joined the registry");
#ifndef TESSEL_RPC_HEALTH_H_
#define TESSEL_RPC_HEALTH_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessel {

// HealthReporter: what a process's grpc.health.v1 answers, on its service port and on an
// optional plaintext health port (--health_listen, for Kubernetes' gRPC
// probes, which cannot present client certificates):
//   service ""          readiness: SERVING only while SetReady(true)
//   each name in `services` (e.g. "tessel.v1.ShardServer"): the same
//   service "liveness"  SERVING while the process answers at all
// Starts NOT_SERVING. Thread-safe; SetReady logs each change with its reason.
class HealthReporter {
 public:
  explicit HealthReporter(std::vector<std::string> services);
  // Starts the plaintext health-only listener on `address` (host:port;
  // "" = none). The bound address is health_address().
  absl::Status Listen(absl::string_view address);
  // Reports through `server`'s health service too (not owned; must outlive
  // this reporter or be removed with Detach before it shuts down).
  void Attach(grpc::Server* server);
  void Detach(grpc::Server* server);
  void SetReady(bool ready, absl::string_view reason);
  bool ready() const;
  // What readiness answers for `service` (NotFound for an unknown name).
  absl::StatusOr<bool> Serving(absl::string_view service) const;
  const std::string& health_address() const { return health_address_; }
  // Stops the health listener (the attached servers are their owners').
  void Shutdown();
  ~HealthReporter();

 private:
  void Apply(grpc::Server* server, bool ready) const;

  const std::vector<std::string> services_;
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> listener_;
  std::string health_address_;
  mutable absl::Mutex mu_;
  std::vector<grpc::Server*> servers_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_RPC_HEALTH_H_
