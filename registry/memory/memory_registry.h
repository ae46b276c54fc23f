// MemoryRegistry: the Registry backend that keeps membership in this
// process's memory. Pure logic with an injectable clock: leases lapse only
// when the host calls ExpireLeases (RegistryService does so every 50 ms).
// State is lost when the process exits. Epochs still never go backwards
// across a restart: a group's first epoch is the registry's start time in
// Unix microseconds, and every membership change bumps it by exactly one
// (a registry would need more than one change per microsecond of its life
// to overtake its successor). Members fence with epochs, so a restarted
// registry's epochs must be newer than anything its predecessor handed out.
// EtcdRegistry keeps epochs (and members) in etcd instead.
//
// Thread-safe.
//
// Example:
//   MemoryRegistry registry(absl::Seconds(5));
//   auto joined = registry.Join(member, absl::ZeroDuration());
//   registry.Heartbeat(joined->lease_id);
#ifndef TESSEL_REGISTRY_MEMORY_MEMORY_REGISTRY_H_
#define TESSEL_REGISTRY_MEMORY_MEMORY_REGISTRY_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "registry/registry.h"

namespace tessel {

class MemoryRegistry final : public Registry {
 public:
  explicit MemoryRegistry(
      absl::Duration default_ttl, std::function<absl::Time()> clock = [] { return absl::Now(); });

  absl::StatusOr<Joined> Join(const v1::Member& member, absl::Duration ttl) override;
  absl::StatusOr<int64_t> Heartbeat(int64_t lease_id) override;
  absl::Status Leave(int64_t lease_id) override;
  absl::StatusOr<v1::View> GetView(const std::string& group) override;
  absl::StatusOr<std::vector<v1::View>> ListGroups() override;
  absl::StatusOr<std::vector<Leased>> ListMembers() override;
  int ExpireLeases() override;
  absl::StatusOr<v1::View> WaitForChange(const std::string& group, int64_t after_epoch,
                                         absl::Duration timeout) override;

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
  // First epoch of every group: the Unix microseconds at construction.
  const int64_t epoch_base_;
  absl::Mutex mu_;
  absl::BitGen lease_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_MEMORY_MEMORY_REGISTRY_H_
