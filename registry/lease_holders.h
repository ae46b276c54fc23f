// LeaseHolders: which credential holds each registry lease, so that only the
// member that joined with a lease renews (Heartbeat) or ends (Leave) it. A
// lease id is unguessable for the memory backend but not for etcd's, and it
// is a member's whole membership: another tenant ending it would evict the
// member from its job.
//
// The holder is the joining caller's Caller::Identity() (rpc/caller.h): a
// token's fingerprint and/or a certificate's subject, "" for an anonymous
// caller (who then shares "" with every other anonymous caller: with no
// credential configured nothing tells them apart, and nothing is refused).
//
// A lease this registry process did not see joined (it joined through
// another registry replica sharing etcd, or before this process started) is
// bound to the first identity that renews it here; ending such a lease is
// allowed (the registry cannot tell who holds it).
//
// Threads: any; guarded by its own mutex.
//
// Example:
//   LeaseHolders holders;
//   holders.Bind(lease_id, caller.Identity());                 // Join
//   absl::Status s = holders.Check(lease_id, other.Identity(), "Heartbeat");
//   // ... the registry renewed it:
//   holders.BindIfUnknown(lease_id, other.Identity());
#ifndef TESSEL_REGISTRY_LEASE_HOLDERS_H_
#define TESSEL_REGISTRY_LEASE_HOLDERS_H_

#include <cstdint>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessel {

class LeaseHolders {
 public:
  // `identity` joined and was granted `lease_id`.
  void Bind(int64_t lease_id, std::string identity);
  // OK when `identity` may `rpc` ("Heartbeat", "Leave") lease `lease_id`:
  // it holds it, or the lease is unknown here. PermissionDenied otherwise,
  // naming the lease and not the holder.
  absl::Status Check(int64_t lease_id, const std::string& identity, absl::string_view rpc);
  // After the registry renewed a lease unknown here: `identity` holds it
  // from now on (a lease already bound keeps its holder).
  void BindIfUnknown(int64_t lease_id, const std::string& identity);
  void Forget(int64_t lease_id);
  // Forgets every lease not in `live` (lapsed or evicted members).
  void Retain(const std::set<int64_t>& live);
  size_t size();

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::string> holders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_LEASE_HOLDERS_H_
