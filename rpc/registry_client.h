// RegistryClient: a member's handle on the registry. Joins, keeps the lease
// alive from a background heartbeat thread, leaves on destruction, and waits
// for membership views through the Watch stream.
//
// Thread-safe. If a heartbeat finds the lease gone (the registry lost or
// expired it), lease_status() turns non-OK and stays so; callers treat that
// as "this process was declared dead" (issue: recovery re-joins).
//
// Example:
//   RegistryClient registry("127.0.0.1:7070");
//   TESSEL_RETURN_IF_ERROR(registry.Join(member));
//   auto view = registry.WaitForView("job", [](const v1::View& v) {
//     return v.members_size() == 4; }, absl::Seconds(30));
#ifndef TESSEL_RPC_REGISTRY_CLIENT_H_
#define TESSEL_RPC_REGISTRY_CLIENT_H_

#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/tls.h"

namespace tessel {

class RegistryClient {
 public:
  // `credentials`: mutual TLS when the registry uses it (rpc/tls.h).
  // `token`: sent as `authorization: Bearer` on every call; the registry
  // needs it for ListGroups when it has an admin token and refuses
  // anonymous reads (rpc/auth.h).
  explicit RegistryClient(const std::string& address, const ClientCredentials& credentials = {},
                          std::string token = "");
  ~RegistryClient();

  const std::string& address() const { return address_; }

  // Joins `member.group()`; starts heartbeats at a third of the lease ttl.
  absl::StatusOr<v1::View> Join(const v1::Member& member,
                                absl::Duration ttl = absl::ZeroDuration());
  absl::Status Leave();
  absl::Status lease_status();
  // When the registry last answered a Join or Heartbeat of this client
  // (InfinitePast before the first).
  absl::Time last_contact() const;
  // The epoch of this member's group as of the last heartbeat (or join):
  // a change means someone joined, left or lapsed.
  int64_t group_epoch() const { return group_epoch_.load(); }
  // The joined_epoch the registry gave this client's membership at its last
  // successful Join (Member.joined_epoch: a re-join is a new membership);
  // 0 before one.
  int64_t joined_epoch() const { return joined_epoch_.load(); }

  // Sent with the following heartbeats (the status page's loss curve).
  void SetProgress(int64_t step, double loss);
  // Workers: the last step's phases (worker/reports.h StepPhases), sent with
  // the following heartbeats.
  void SetPhases(int64_t step, int64_t compute_ns, int64_t push_ns, int64_t wait_ns,
                 int64_t pull_ns);
  // Shard servers: called before each heartbeat, its list sent with it (the
  // ranks this server names stragglers now; server/straggler_watcher.h).
  using StragglerSource = std::function<std::vector<v1::Straggler>()>;
  void SetStragglerSource(StragglerSource source);
  // Workers: called on the heartbeat thread whenever the stragglers the
  // registry says the servers name in this member's job change (by job,
  // rank, score or lateness), with the whole new list (empty: none any more).
  using StragglerListener = std::function<void(const std::vector<v1::Straggler>&)>;
  void SetStragglerListener(StragglerListener listener);

  // `liveness`: each worker member with its last heartbeat, lease expiry and
  // last step phases (Member.liveness; tesselctl).
  absl::StatusOr<v1::View> GetView(const std::string& group, bool liveness = false);
  absl::StatusOr<std::vector<v1::View>> ListGroups();

  // Returns the first view of `group` for which `ready` holds, or
  // DeadlineExceeded naming what was last seen.
  absl::StatusOr<v1::View> WaitForView(const std::string& group,
                                       const std::function<bool(const v1::View&)>& ready,
                                       absl::Duration timeout);

 private:
  void HeartbeatLoop(int64_t lease_id, absl::Duration period);
  void StopHeartbeats();
  void Prepare(grpc::ClientContext* ctx) const;

  const std::string address_;
  const std::string token_;
  std::unique_ptr<v1::Registry::Stub> stub_;
  absl::Mutex mu_;
  int64_t lease_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status lease_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  StragglerSource straggler_source_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::StepPhases> phases_ ABSL_GUARDED_BY(mu_);
  StragglerListener straggler_listener_ ABSL_GUARDED_BY(mu_);
  // (job, rank, score, lateness) of the stragglers last heard of (heartbeat
  // thread only): the listener hears of a new score too.
  std::vector<std::tuple<std::string, int, double, double>> stragglers_heard_;
  std::thread heartbeat_;
  std::atomic<int64_t> group_epoch_{0};
  std::atomic<int64_t> joined_epoch_{0};
  std::atomic<int64_t> progress_step_{-1};
  std::atomic<double> progress_loss_{0};
  std::atomic<int64_t> last_contact_ns_{std::numeric_limits<int64_t>::min()};
};

// Short human description of a view, e.g. "epoch 4: worker 0, worker 1".
std::string DescribeView(const v1::View& view);

}  // namespace tessel

#endif  // TESSEL_RPC_REGISTRY_CLIENT_H_
