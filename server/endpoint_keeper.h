// EndpointKeeper: keeps a shard server's data endpoint able to receive. A
// peer killed while writing into this process's receive queue (UCX shared
// memory) can wedge it for good: nothing sent to the address is received
// again. Check() probes the queue (Transport::CheckReceiveQueue); when the
// probe fails it leaves the registry, re-creates the endpoint at a new
// address (Transport::Reset) and joins again with it. Workers see the new
// address, reconnect and recover as after a server restart (the group's
// epoch moves twice). Jobs on the server stay; their recovery re-creates
// them from checkpoints.
//
// A transport that cannot be probed (CheckReceiveQueue is Unimplemented)
// has nothing to check: Check() returns OK and renews nothing.
//
// Threads: not thread-safe; one thread (the ShardServer's supervisor) calls
// Check(). The transport and registry client are not owned and must outlive
// the keeper.
//
// Example:
//   EndpointKeeper keeper(transport, &registry, member, {.probe_timeout = absl::Seconds(3)});
//   absl::Status s = keeper.Check([&] { return stopping; });
//   if (!s.ok()) { /* cannot receive any more: exit so a supervisor restarts us */ }
#ifndef TESSEL_SERVER_ENDPOINT_KEEPER_H_
#define TESSEL_SERVER_ENDPOINT_KEEPER_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/lease.h"
#include "proto/registry.pb.h"
#include "rpc/registry_client.h"
#include "transport/transport.h"

namespace tessel {

struct EndpointKeeperOptions {
  // How long a probe may take before the receive queue counts as wedged.
  absl::Duration probe_timeout = kReceiveQueueProbeTimeout;
  // How long to keep trying to re-join the registry after a renewal.
  absl::Duration join_timeout = absl::Seconds(30);
  // The lease ttl of the re-join.
  absl::Duration lease_ttl = kDefaultLeaseTtl;
  // Called once a probe has found the queue wedged, before the renewal
  // (e.g. to report NOT_SERVING). May be empty.
  std::function<void()> on_wedged;
};

class EndpointKeeper {
 public:
  // `member` is how this server joined the registry; its ucx_address is
  // replaced on renewal.
  EndpointKeeper(Transport* transport, RegistryClient* registry, v1::Member member,
                 EndpointKeeperOptions options);

  // Probes the receive queue once and renews the endpoint if it is wedged.
  // OK: the queue works, cannot be probed, or was renewed (or `stopping()`
  // turned true first: nothing is renewed for a server that stops). Error:
  // the renewal failed and this server cannot receive any more (Internal:
  // the endpoint could not be re-created; Unavailable: the re-join failed).
  // `stopping` (may be null) is polled between re-join attempts.
  absl::Status Check(const std::function<bool()>& stopping);

  // The member as registered now.
  const v1::Member& member() const { return member_; }
  // How many times the endpoint was renewed.
  int renewals() const { return renewals_; }

 private:
  absl::Status Renew(const absl::Status& why, const std::function<bool()>& stopping);

  Transport* const transport_;
  RegistryClient* const registry_;
  v1::Member member_;
  const EndpointKeeperOptions options_;
  int renewals_ = 0;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_ENDPOINT_KEEPER_H_
