// EtcdRegistry: the Registry backend that keeps membership in etcd (v3 API
// over gRPC, etcd_client.h), for production: the state outlives the registry
// process, several registry processes may serve the same etcd, and lease
// expiry is etcd's own.
//
// Layout under `prefix` (default /tessel); group names are escaped so that
// '/' cannot reach into another group's keys:
//   <prefix>/groups/<group>/members/<worker|server>/<rank>  -> v1::Member,
//        bound to the member's etcd lease (Registry lease id = etcd lease ID)
//   <prefix>/groups/<group>/epoch  -> "<epoch> <members>": the group's epoch
//        and how many members it describes (no lease: it outlives members).
//
// Epochs. The epoch key is the only writer-visible counter, and it changes
// only by compare-and-swap on its mod_revision, so it never goes backwards,
// whoever writes it, across restarts and with several registries.
//   - Join puts the member key and "<epoch+1> <members+1>" in one txn, with
//     the CAS and "member key absent" as its conditions.
//   - Leave, eviction and lease expiry delete member keys without touching
//     the epoch key (etcd deletes them when the lease ends). A group whose
//     live member count differs from the count in its epoch record is
//     *dirty*; every read (GetView, ListGroups, WaitForChange, the watcher)
//     repairs a dirty group before answering by CAS-writing "<epoch+1>
//     <live members>". Since every addition goes through the epoch txn, a
//     count mismatch is exactly "members left since the epoch was written",
//     so no view is ever served with an epoch that named other members.
//     Several removals between two reads are one bump.
//   - A watcher thread follows <prefix>/groups/ and repairs every group an
//     event touches at once, so an expiry is visible (and watchers wake)
//     within milliseconds of etcd deleting the key. On start (and after the
//     watch breaks) it rescans every group, which also repairs what lapsed
//     while no registry ran.
//
// Heartbeat is one etcd LeaseKeepAlive. TTLs are whole seconds in etcd: a
// requested ttl is rounded up, and etcd may raise it to its minimum (about
// 1.5 x election timeout; 2 s with etcd's defaults); Joined::ttl is what etcd
// granted.
//
// Threads: thread-safe; owns the watcher thread, joined by the destructor.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(auto registry,  // the error names the endpoint
//                           EtcdRegistry::Connect({.endpoints = {"127.0.0.1:2379"}}));
//   auto joined = registry->Join(member, absl::ZeroDuration());
#ifndef TESSEL_REGISTRY_ETCD_ETCD_REGISTRY_H_
#define TESSEL_REGISTRY_ETCD_ETCD_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/lease.h"
#include "registry/etcd/etcd_client.h"
#include "registry/registry.h"

namespace tessel {

struct EtcdRegistryOptions {
  std::vector<std::string> endpoints = {"127.0.0.1:2379"};
  std::string prefix = "/tessel";
  absl::Duration default_ttl = kDefaultLeaseTtl;
  absl::Duration rpc_timeout = absl::Seconds(5);  // deadline of every etcd call
  // TLS to etcd (rpc/tls.h LoadTlsClientCredentials); default plaintext,
  // unless an endpoint is https:// (EtcdClient::Connect).
  ClientCredentials credentials = {};
};

class EtcdRegistry final : public Registry {
 public:
  // Connects (Unavailable naming the endpoints if etcd does not answer),
  // scans existing groups and starts the watcher.
  static absl::StatusOr<std::unique_ptr<EtcdRegistry>> Connect(EtcdRegistryOptions options);
  ~EtcdRegistry() override;

  absl::StatusOr<Joined> Join(const v1::Member& member, absl::Duration ttl) override;
  absl::StatusOr<int64_t> Heartbeat(int64_t lease_id) override;
  absl::Status Leave(int64_t lease_id) override;
  absl::StatusOr<v1::View> GetView(const std::string& group) override;
  absl::StatusOr<std::vector<v1::View>> ListGroups() override;
  absl::StatusOr<std::vector<Leased>> ListMembers() override;
  int ExpireLeases() override { return 0; }  // etcd expires leases itself
  absl::StatusOr<v1::View> WaitForChange(const std::string& group, int64_t after_epoch,
                                         absl::Duration timeout) override;

 private:
  // One group as read from etcd in one Range (a consistent snapshot).
  struct GroupState {
    int64_t epoch = 0;
    int64_t recorded_members = 0;
    int64_t epoch_mod_revision = 0;  // 0: no epoch key yet
    std::vector<Leased> members;     // sorted by (role, rank)
    bool dirty() const { return recorded_members != static_cast<int64_t>(members.size()); }
  };

  EtcdRegistry(EtcdRegistryOptions options, std::unique_ptr<EtcdClient> etcd);

  std::string GroupsPrefix() const;
  std::string GroupPrefix(const std::string& group) const;
  std::string EpochKey(const std::string& group) const;
  std::string MemberKey(const v1::Member& member) const;
  // The group a key under GroupsPrefix() belongs to ("" if none).
  std::string GroupOfKey(const std::string& key) const;

  // Parses the kvs of one group's Range.
  static absl::StatusOr<GroupState> ParseGroup(
      const std::string& epoch_key,
      const google::protobuf::RepeatedPtrField<mvccpb::KeyValue>& kvs);
  absl::StatusOr<GroupState> ReadGroup(const std::string& group);
  // Reads the group, repairs it if dirty, and returns its clean view (and
  // updates the caches, waking waiters).
  absl::StatusOr<v1::View> Reconcile(const std::string& group);
  void Remember(const std::string& group, int64_t epoch, const std::vector<Leased>& members);

  // Follows the groups prefix from `revision` + 1 until the destructor.
  void WatchLoop(int64_t revision);
  absl::Status ResyncAll(int64_t* revision);

  const EtcdRegistryOptions options_;
  const std::unique_ptr<EtcdClient> etcd_;

  absl::Mutex mu_;
  // Latest clean epoch seen per group (only grows); WaitForChange waits on it.
  std::map<std::string, int64_t> epochs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::string> group_by_lease_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watch_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;  // to cancel the watch
  std::thread watcher_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_ETCD_ETCD_REGISTRY_H_
