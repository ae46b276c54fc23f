// Registry: membership of groups (training jobs and shard-server pools) under
// leases. Pure logic with an injectable clock; the gRPC adapter is
// registry_service.h.
//
// Contract:
//   - Join adds a member and returns a lease; (group, role, rank) is unique
//     among live members (a second join of a taken rank is AlreadyExists).
//     Lease ids are random 63-bit numbers: a lease id is what lets a member
//     renew or end its membership, so another client cannot guess it.
//   - Heartbeat renews a live lease; an unknown or lapsed lease is NotFound
//     (the member must join again).
//   - Leave and lease expiry (ExpireLeases, driven by the service's timer)
//     remove the member.
//   - Every membership change bumps that group's epoch by one; epochs never
//     go backwards, also when a group becomes empty and is joined again.
//   - WaitForChange blocks until a group's epoch passes `after_epoch`.
//
// Thread-safe.
//
// Example:
//   Registry registry(absl::Seconds(5));
//   auto joined = registry.Join(member, absl::ZeroDuration());
//   registry.Heartbeat(joined->lease_id);
#ifndef TESSEL_SERVER_REGISTRY_H_
#define TESSEL_SERVER_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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

  explicit Registry(
      absl::Duration default_ttl, std::function<absl::Time()> clock = [] { return absl::Now(); });

  absl::StatusOr<Joined> Join(const v1::Member& member, absl::Duration ttl);
  // Returns the group's current epoch.
  absl::StatusOr<int64_t> Heartbeat(int64_t lease_id);
  absl::Status Leave(int64_t lease_id);
  v1::View GetView(const std::string& group);
  std::vector<v1::View> ListGroups();
  // Removes members whose lease lapsed; returns how many.
  int ExpireLeases();
  // True and the new view if the group's epoch exceeds after_epoch within timeout.
  bool WaitForChange(const std::string& group, int64_t after_epoch, absl::Duration timeout,
                     v1::View* view);

 private:
  struct Lease {
    std::string group;
    v1::Member member;
    absl::Duration ttl;
    absl::Time expires;
  };
  struct Group {
    int64_t epoch = 0;
    std::map<std::pair<int, int>, int64_t> lease_by_slot;  // (role, rank) -> lease
  };

  v1::View ViewLocked(const std::string& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(int64_t lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration default_ttl_;
  const std::function<absl::Time()> clock_;
  absl::Mutex mu_;
  absl::BitGen lease_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_REGISTRY_H_
