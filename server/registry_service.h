// gRPC adapter for a Registry backend (tessel.v1.Registry). Handlers only
// translate; the logic is in the backend (memory_registry.h, etcd_registry.h).
// The service also hosts what runs beside the handlers: the timer that calls
// Registry::ExpireLeases every 50 ms, and optionally the HealthChecker
// (health_checker.h) that evicts members failing grpc.health.v1 checks.
//
// Threads: gRPC's handler threads, plus one expiry thread and one health
// check thread, all owned here and joined by Stop().
//
// Example:
//   RegistryService service(std::make_unique<MemoryRegistry>(absl::Seconds(5)));
//   std::string bound;
//   auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
#ifndef TESSEL_SERVER_REGISTRY_SERVICE_H_
#define TESSEL_SERVER_REGISTRY_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "proto/registry.grpc.pb.h"
#include "server/health_checker.h"
#include "server/registry.h"

namespace tessel {

class RegistryService final : public v1::Registry::Service {
 public:
  // Serves `registry`; runs health checks if `health` is set and its period
  // is positive.
  explicit RegistryService(std::unique_ptr<Registry> registry,
                           std::optional<HealthCheckOptions> health = std::nullopt);
  // Serves a MemoryRegistry with this default ttl, without health checks.
  explicit RegistryService(absl::Duration default_ttl);
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
  std::atomic<bool> stop_{false};
  std::thread expirer_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_REGISTRY_SERVICE_H_
