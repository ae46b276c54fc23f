// Registry: membership of groups (training jobs and shard-server pools) under
// leases. This is the interface; the backends are MemoryRegistry
// (memory/memory_registry.h: one process, tests, LocalCluster) and
// EtcdRegistry (etcd/etcd_registry.h: production, state in etcd). The gRPC
// adapter that serves either is registry_service.h. One conformance suite
// (registry_conformance_test.cc) runs against every backend, each built by
// backend_factory.h.
//
// Contract (every backend):
//   - Join adds a member and returns a lease; (group, role, rank) is unique
//     among live members (a second join of a taken rank is AlreadyExists and
//     changes nothing). Lease ids cannot be guessed (random in memory, etcd's
//     lease ids in etcd): the id is what renews or ends a membership. A backend may round the ttl
//     up (etcd: whole seconds); Joined::ttl is the ttl granted.
//   - Heartbeat renews a live lease; an unknown or lapsed lease is NotFound
//     (the member must join again).
//   - Leave, lease expiry and eviction (Leave called by the health checker)
//     remove the member.
//   - Every membership change bumps that group's epoch; epochs never go
//     backwards, also when a group becomes empty and is joined again, and (for
//     backends with durable state) across registry restarts. Two views with
//     the same epoch have the same members. MemoryRegistry bumps by exactly
//     one per change; EtcdRegistry by one per change it observes (two leases
//     lapsing together may be one bump).
//   - WaitForChange returns the group's view once its epoch exceeds
//     `after_epoch`, or DeadlineExceeded after `timeout`.
//   - Errors of the backing store (etcd unreachable) come back as Unavailable
//     naming the store and what to do.
//
// Thread-safe.
//
// Example:
//   std::unique_ptr<Registry> registry = std::make_unique<MemoryRegistry>(absl::Seconds(5));
//   auto joined = registry->Join(member, absl::ZeroDuration());
//   registry->Heartbeat(joined->lease_id);
#ifndef TESSEL_REGISTRY_REGISTRY_H_
#define TESSEL_REGISTRY_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/registry.pb.h"

namespace tessel {

class Registry {
 public:
  struct Joined {
    int64_t lease_id;
    absl::Duration ttl;
    v1::View view;
  };
  // A live member and the lease that keeps it (for the health checker).
  struct Leased {
    int64_t lease_id;
    v1::Member member;
  };

  virtual ~Registry() = default;

  // `ttl` zero means the registry's default.
  virtual absl::StatusOr<Joined> Join(const v1::Member& member, absl::Duration ttl) = 0;
  // Returns the group's current epoch.
  virtual absl::StatusOr<int64_t> Heartbeat(int64_t lease_id) = 0;
  virtual absl::Status Leave(int64_t lease_id) = 0;
  // An unknown group has epoch 0 and no members.
  virtual absl::StatusOr<v1::View> GetView(const std::string& group) = 0;
  // Every group the registry knows, including emptied ones, sorted by name.
  virtual absl::StatusOr<std::vector<v1::View>> ListGroups() = 0;
  // Every live member of every group, with its lease.
  virtual absl::StatusOr<std::vector<Leased>> ListMembers() = 0;
  // Removes members whose lease lapsed and returns how many, for backends
  // that keep time themselves (the host calls it periodically). A store with
  // native leases (etcd) expires them on its own and returns 0.
  virtual int ExpireLeases() = 0;
  virtual absl::StatusOr<v1::View> WaitForChange(const std::string& group, int64_t after_epoch,
                                                 absl::Duration timeout) = 0;
};

// Checks what every backend requires of a joining member: a group, a role of
// WORKER or SERVER, rank >= 0, and a ttl (after defaulting) in [100ms, 10m].
absl::Status ValidateJoin(const v1::Member& member, absl::Duration ttl);

// "worker 3" / "server 0" (for messages).
std::string DescribeMember(const v1::Member& member);

}  // namespace tessel

#endif  // TESSEL_REGISTRY_REGISTRY_H_
