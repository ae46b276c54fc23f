// gRPC adapter for Registry (tessel.v1.Registry), plus the timer that expires
// lapsed leases. Handlers only translate; the logic is in registry.h.
//
// Example:
//   RegistryService service(absl::Seconds(5));
//   std::string bound;
//   auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
#ifndef TESSEL_SERVER_REGISTRY_SERVICE_H_
#define TESSEL_SERVER_REGISTRY_SERVICE_H_

#include <atomic>
#include <thread>

#include "proto/registry.grpc.pb.h"
#include "server/registry.h"

namespace tessel {

class RegistryService final : public v1::Registry::Service {
 public:
  explicit RegistryService(absl::Duration default_ttl);
  ~RegistryService() override;

  Registry& registry() { return registry_; }
  // Ends Watch streams promptly (call before grpc::Server::Shutdown).
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
  Registry registry_;
  std::atomic<bool> stop_{false};
  std::thread expirer_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_REGISTRY_SERVICE_H_
