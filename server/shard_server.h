// ShardServer: one shard server, in-process. Wires what a shard server is
// made of: the checkpoint store and Checkpointer, the JobTable, the
// DataPlane over an injected Transport, the ShardService (tessel.v1.ShardServer) with the
// standard grpc.health.v1 service on one gRPC server, the registry
// membership (shard `shard` of `pool`, under a lease), the StallWatcher, and
// the EndpointKeeper that probes the receive queue and renews a wedged
// endpoint. `tessel-server` (server_main.cc) is this class behind flags;
// tests run several of them in one process over the in-process transport.
//
// Life: Start() returns once the server serves gRPC and has joined the
// registry (retrying for up to `join_timeout` while a previous server of the
// shard still holds its lease, after a crash and restart, or while the
// registry is not reachable yet). It then runs
// until Shutdown(), or until it fails by itself: a wedged endpoint cannot be
// renewed, or (with `exit_on_lost_lease`) its registry lease is lost. By
// default a lost lease (a memory registry restarted, or the registry
// declared this server dead) is not fatal: the server keeps its jobs and
// joins again, retrying until the registry answers; workers see the shard
// leave and come back and recover as after a server restart. Wait()/WaitFor()
// report a failure; a supervisor should then restart the process.
//
// Readiness (grpc.health.v1 service "" and "tessel.v1.ShardServer", on the
// service port and on `health_listen`): SERVING only while joined and in
// touch with the registry; NOT_SERVING while starting, re-joining, cut off
// from the registry (no heartbeat answered for a lease ttl), renewing a
// wedged endpoint and draining. Service "liveness": SERVING while the
// process answers.
//
// Threads: Start, Wait, WaitFor and Shutdown may be called from any thread.
// The server owns a supervisor thread (lease watch and receive-queue checks,
// every 100 ms), the stall watcher's thread, the data plane's compute thread
// and gRPC's threads; the transport runs its own progress thread.
//
// Example:
//   ShardServerOptions options;
//   options.registry = "127.0.0.1:7070";
//   options.shard = 0;
//   TESSEL_ASSIGN_OR_RETURN(auto server,
//                           ShardServer::Start(options, InProcTransport::Create(fabric)));
//   ... server->grpc_address() ...
//   server->Shutdown();
#ifndef TESSEL_SERVER_SHARD_SERVER_H_
#define TESSEL_SERVER_SHARD_SERVER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/lease.h"
#include "rpc/auth.h"
#include "rpc/tls.h"
#include "runtime/timeline.h"
#include "server/data_plane.h"
#include "server/server_metrics.h"
#include "transport/transport.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tessel {

class Checkpointer;
class EndpointKeeper;
class HealthReporter;
class JobTable;
class FrameKeys;
class RegistryClient;
class ShardService;
class StallWatcher;
class StragglerWatcher;

struct ShardServerOptions {
  // Chrome-trace timeline of steps steps timeline_window (first_step, steps)
  // ("{shard}" replaced; "" = off): per bucket, pushes received, the
  // reduction and update, parameters sent (runtime/timeline.h).
  std::string timeline;
  TimelineOptions timeline_window;
  // host:port of the control gRPC service (port 0 picks a free port).
  std::string listen = "127.0.0.1:0";
  // The host registered for the gRPC address ("" = AdvertiseHost's default:
  // the listen host, or for a wildcard listen POD_IP or this host's first
  // non-loopback IPv4; rpc/grpc_util.h).
  std::string advertise_address;
  // Plaintext grpc.health.v1-only listener for probes ("" = none).
  std::string health_listen;
  // End the server (for a supervisor to restart) when the registry loses its
  // lease, instead of joining again.
  bool exit_on_lost_lease = false;
  // host:port of the membership registry (required).
  std::string registry;
  // Server pool to join; workers find servers by pool.
  std::string pool = "default";
  // This server's shard index within the pool (required, >= 0).
  int shard = -1;
  absl::Duration lease_ttl = kDefaultLeaseTtl;
  // Keep trying to join this long while a previous server of this shard
  // still holds its lease; also bounds the re-join after an endpoint renewal.
  absl::Duration join_timeout = absl::Seconds(30);
  // Root of the checkpoint store, shared by every server of the pool
  // ("" = checkpoints disabled).
  std::string checkpoint_dir;
  // Snapshots that may wait for the checkpoint writer (0 = no bound).
  int checkpoint_max_queued = 8;
  // Testing only: pause per MiB of checkpoint written.
  absl::Duration checkpoint_write_delay = absl::ZeroDuration();
  // Who may call which RPC (rpc/auth.h: admin and worker tokens,
  // certificate roles, anonymous reads); nothing configured = everything.
  AuthOptions admin;
  // How callers are authenticated, for GetServerInfo and the start-up line
  // (rpc/auth_options.h SecurityPosture's description; "" = not said).
  std::string security;
  // Token this server presents to the registry (its --server_token_file);
  // "" = none.
  std::string registry_token;
  // Mutual TLS for the gRPC server and the registry client (off when empty).
  TlsOptions tls;
  // Log a stalled step after this long, and again every as long (0 = off);
  // also when the straggler watcher writes the flight recorder of a stalled
  // step (into flight_dir; "" = $TMPDIR or /tmp).
  absl::Duration stall_report = absl::Seconds(30);
  std::string flight_dir;
  // Probe the receive queue this often (0 = off), each probe waiting up to
  // receive_check_timeout.
  absl::Duration receive_check_period = absl::Seconds(1);
  absl::Duration receive_check_timeout = absl::Seconds(3);
  // Threads that reduce and update complete buckets (different buckets of a
  // step at once); 0 = automatic: half this machine's cores, 1 to 8.
  int update_threads = 0;
  // An update thread out of work polls (yielding) this long before it
  // sleeps, so the next bucket starts without a wake-up (DataPlane).
  absl::Duration update_spin = kDefaultUpdateSpin;
  // Whether they poll at all: tessel-server passes --poll_mode (auto: only
  // while this host's polling threads fit its cores; runtime/spin_budget.h).
  SpinMode poll_mode = SpinMode::kSpin;
  // Sum the ranks of a bucket that landed in rank order before its last
  // rank arrives (prefix order; three or more workers). Off only to
  // measure what it saves.
  bool fold_prefix = true;
  // Buckets of at most this many bytes are reduced, updated and served on
  // the transport's thread as their last push lands (DataPlane); 0: never.
  int64_t inline_update_max_bytes = 0;
  // Every frame of every job must carry a tag made with the job's key,
  // which its workers get over the control plane (server/frame_keys.h,
  // docs/security.md); frames without a valid one are dropped and counted.
  bool data_auth = false;
  // With data_auth: every frame also carries a tag of its payload, checked
  // before it is summed or used (--data_integrity=payload; the workers learn
  // it from GetFrameKey). Off: header tags only.
  bool data_integrity_payload = false;
  // Polled while Start() retries the join: true gives up (e.g. a signal).
  std::function<bool()> cancelled;
};

class ShardServer {
 public:
  // Starts a server whose data path is `transport` (owned from now on).
  // InvalidArgument for bad options; otherwise the error that stopped it
  // (credentials, gRPC bind, registry join).
  static absl::StatusOr<std::unique_ptr<ShardServer>> Start(ShardServerOptions options,
                                                            std::unique_ptr<Transport> transport);
  // Stops without finishing checkpoint writes if Shutdown() was not called.
  ~ShardServer();

  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // The registered "host:port" of the gRPC service.
  const std::string& grpc_address() const { return grpc_address_; }
  // The bound "host:port" of the health-only listener ("" without one).
  const std::string& health_address() const;
  // What readiness answers now.
  bool ready() const;
  // Where workers send frames now (changes when the endpoint is renewed).
  std::string transport_address() const;
  const ShardServerOptions& options() const { return options_; }

  // Blocks until the server stops: OK after Shutdown(), else why it failed
  // (Unavailable "lost registry lease ...", or the endpoint renewal's error).
  absl::Status Wait();
  // As Wait(), for at most `timeout`: nullopt while the server still runs.
  std::optional<absl::Status> WaitFor(absl::Duration timeout);

  // Stops gracefully: finishes queued checkpoint writes, leaves the
  // registry, stops gRPC (1 s grace) and the transport. Idempotent.
  void Shutdown();

 private:
  ShardServer(ShardServerOptions options, std::unique_ptr<Transport> transport);
  absl::Status Init();
  void Supervise();
  // Joins again after a lost lease, until joined or stopping. False: stopping.
  bool Rejoin();
  void UpdateReadiness();
  void End(absl::Status status);
  void Stop(bool drain);
  // The straggler watcher, its list sent with the registry heartbeats.
  void StartStragglerWatcher();

  const ShardServerOptions options_;
  // Outlive the plane that updates them.
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<FrameKeys> frame_keys_;  // before the plane and the service
  std::unique_ptr<DataPlane> plane_;
  // Before the service (GetFrameKey asks it), so it outlives it.
  std::unique_ptr<RegistryClient> registry_;
  std::unique_ptr<ShardService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::string grpc_address_;
  std::unique_ptr<HealthReporter> health_;
  std::unique_ptr<StallWatcher> stall_watcher_;
  // Shared with the registry client's heartbeats, which send its list.
  std::shared_ptr<StragglerWatcher> straggler_watcher_;
  // Used by the supervisor thread only, once started.
  std::unique_ptr<EndpointKeeper> keeper_;
  absl::Notification stop_;
  std::thread supervisor_;

  absl::Mutex mu_;
  // Set once the server stops: OK by Shutdown, or why it failed.
  std::optional<absl::Status> ended_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Reads jobs_, plane_ and checkpointer_ on each scrape: destroyed first.
  metrics::Registry::CollectorHandle metrics_watch_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_SERVER_H_
