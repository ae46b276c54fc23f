// gRPC adapter for a Registry backend (tessel.v1.Registry). Handlers only
// translate; the logic is in the backend (memory/memory_registry.h,
// etcd/etcd_registry.h).
// The service also hosts what runs beside the handlers: the timer that calls
// Registry::ExpireLeases every 50 ms, and optionally the HealthChecker
// (health_checker.h) that evicts members failing grpc.health.v1 checks.
//
// Threads: gRPC's handler threads, plus one expiry thread and one health
// check thread, all owned here and joined by Stop().
//
// Authorization (rpc/auth.h): Join, Heartbeat, Leave, GetView and Watch are
// member operations, open to every client the transport lets in (with mutual
// TLS: holders of a certificate from the cluster's CA); Heartbeat and Leave
// act only on the caller's own lease, named by its unguessable id.
// ListGroups, which lists every job and pool with their addresses, is an
// operator read: with an admin token it needs the token unless
// `allow_anonymous_reads`. The registry has no admin-only RPC today; one
// added later (e.g. evicting a member) must check Access::kAdmin.
//
// Example:
//   RegistryService service(std::make_unique<MemoryRegistry>(absl::Seconds(5)));
//   std::string bound;
//   auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
#ifndef TESSEL_REGISTRY_REGISTRY_SERVICE_H_
#define TESSEL_REGISTRY_REGISTRY_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "proto/registry.grpc.pb.h"
#include "registry/health_checker.h"
#include "registry/registry.h"
#include "rpc/auth.h"

namespace tessel {

class RegistryService final : public v1::Registry::Service {
 public:
  // Serves `registry`; runs health checks if `health` is set and its period
  // is positive.
  explicit RegistryService(std::unique_ptr<Registry> registry,
                           std::optional<HealthCheckOptions> health = std::nullopt,
                           AdminAuthOptions auth = {});
  // Serves a MemoryRegistry with this default ttl, without health checks.
  explicit RegistryService(absl::Duration default_ttl, AdminAuthOptions auth = {});
  ~RegistryService() override;

  Registry& registry() { return *registry_; }
  // Ends Watch streams promptly and stops the background threads (call
  // before grpc::Server::Shutdown).
  void Stop();

  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveResponse*) override;
  grpc::Status GetView(grpc::ServerContext*, const v1::GetViewRequest*,
                       v1::GetViewResponse*) override;
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::View>*) override;
  grpc::Status ListGroups(grpc::ServerContext*, const v1::ListGroupsRequest*,
                          v1::ListGroupsResponse*) override;

 private:
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<HealthChecker> health_checker_;
  const AdminAuth auth_;
  std::atomic<bool> stop_{false};
  std::thread expirer_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_REGISTRY_SERVICE_H_
