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
// Authorization (rpc/auth.h, service "Registry" of its role table): with no
// credential configured everything is open, as before roles. Heartbeat and
// Leave need no role: they act only on the caller's own lease, and once
// credentials are configured a lease is bound at Join to the joining
// caller's identity (LeaseHolders, registry/lease_holders.h): another
// credential's Heartbeat or Leave of it is refused (PERMISSION_DENIED), an
// admin's allowed. The
// member operations stay open (mutual TLS is what
// keeps strangers out) until member credentials are configured: with server
// tokens (--server_token_file) or certificate roles (--cert_roles) a Join as
// ROLE_SERVER needs a server or admin credential; with worker tokens or
// certificate roles a Join of any other role needs a worker credential
// covering the group (the job) or an admin's; with either, GetView and Watch
// need some credential. ListGroups, which lists every job and pool with
// their addresses, is an operator read: admin or reader, anonymous while
// `allow_anonymous_reads`. An RPC added later needs its row in the table
// (auth_test fails otherwise).
//
// Example:
//   RegistryService service(std::make_unique<MemoryRegistry>(absl::Seconds(5)));
//   std::string bound;
//   auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
#ifndef TESSEL_REGISTRY_REGISTRY_SERVICE_H_
#define TESSEL_REGISTRY_REGISTRY_SERVICE_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "proto/registry.grpc.pb.h"
#include "registry/health_checker.h"
#include "registry/lease_holders.h"
#include "registry/registry.h"
#include "registry/straggler_board.h"
#include "rpc/auth.h"
#include "runtime/metrics.h"

namespace tessel {

class RegistryService final : public v1::Registry::Service {
 public:
  // Serves `registry`; runs health checks if `health` is set and its period
  // is positive.
  explicit RegistryService(std::unique_ptr<Registry> registry,
                           std::optional<HealthCheckOptions> health = std::nullopt,
                           AuthOptions auth = {});
  // Serves a MemoryRegistry with this default ttl, without health checks.
  explicit RegistryService(absl::Duration default_ttl, AuthOptions auth = {});
  ~RegistryService() override;

  Registry& registry() { return *registry_; }

  // Training progress rank 0 of a group reported with its heartbeats
  // (Worker::ReportLoss): the last kMaxProgress points, oldest first. Kept
  // in this process only (the status page's loss curve).
  struct ProgressPoint {
    int64_t unix_ms;
    int64_t step;
    double loss;
  };
  static constexpr size_t kMaxProgress = 600;
  std::map<std::string, std::vector<ProgressPoint>> Progress();
  // The ranks the shard servers name stragglers now (their heartbeats).
  StragglerBoard& stragglers() { return stragglers_; }
  // Each worker's last step phases (HeartbeatRequest.phases), by group and
  // registry rank, with when they came (unix ms). This process only.
  struct RankPhases {
    int64_t unix_ms = 0;
    v1::StepPhases phases;
  };
  std::map<std::string, std::map<int, RankPhases>> Phases();
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
  void CollectMetrics();
  // Drops leases_ and holders_ entries of leases the registry no longer holds.
  void PruneLeases();
  // OK for an admin, or unless `lease_id` is held by another identity than
  // the caller's (LeaseHolders::Check); called while credentials are
  // configured.
  grpc::Status CheckHolder(int64_t lease_id, const Caller& caller, absl::string_view rpc);
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<HealthChecker> health_checker_;
  const Authorizer auth_;
  std::atomic<bool> stop_{false};
  std::thread expirer_;
  absl::Mutex progress_mu_;
  // Lease -> (group, rank), from Join, for heartbeats' progress.
  std::map<int64_t, std::pair<std::string, int>> leases_ ABSL_GUARDED_BY(progress_mu_);
  std::map<std::string, std::deque<ProgressPoint>> progress_ ABSL_GUARDED_BY(progress_mu_);
  // Lease -> its worker's last phases (group and rank from leases_).
  std::map<int64_t, RankPhases> phases_ ABSL_GUARDED_BY(progress_mu_);
  // Lease -> its worker's TTL and last heartbeat here (unix ms), for
  // GetView's Member.liveness.
  struct Liveness {
    int64_t ttl_ms = 0;
    int64_t last_heartbeat_ms = 0;
  };
  std::map<int64_t, Liveness> liveness_ ABSL_GUARDED_BY(progress_mu_);
  // Fills Member.liveness of `view`'s workers from liveness_ and phases_.
  void AddLiveness(v1::View* view);
  // Who joined with each lease (only while credentials are configured).
  LeaseHolders holders_;
  StragglerBoard stragglers_;
  // tessel_registry_* gauges, read from the registry on each scrape.
  metrics::Registry::CollectorHandle metrics_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_REGISTRY_SERVICE_H_
