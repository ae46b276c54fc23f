#include "server/shard_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "proto/registry.pb.h"
#include "rpc/grpc_util.h"
#include "rpc/health.h"
#include "rpc/registry_client.h"
#include "runtime/log.h"
#include "server/checkpoint_store.h"
#include "server/checkpointer.h"
#include "server/data_plane.h"
#include "server/endpoint_keeper.h"
#include "server/job_table.h"
#include "server/shard_service.h"
#include "server/stall_watcher.h"
#include "server/straggler_watcher.h"

namespace tessel {
namespace {
constexpr absl::Duration kSupervisePeriod = absl::Milliseconds(100);
constexpr int kMaxUpdateThreads = 256;

absl::Status Validate(const ShardServerOptions& o) {
  if (o.registry.empty()) return absl::InvalidArgumentError("registry address is required");
  if (o.shard < 0) return absl::InvalidArgumentError("shard must be >= 0");
  if (o.stall_report < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("stall_report must be >= 0 (0 turns stall reports off)");
  }
  if (o.checkpoint_max_queued < 0) {
    return absl::InvalidArgumentError("checkpoint_max_queued must be >= 0");
  }
  if (o.lease_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("lease_ttl must be positive");
  }
  if (o.receive_check_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("receive_check_timeout must be positive");
  }
  if (o.update_threads < 0 || o.update_threads > kMaxUpdateThreads) {
    return absl::InvalidArgumentError(absl::StrCat("update_threads must be in [0, ",
                                                   kMaxUpdateThreads, "] (0 = automatic); got ",
                                                   o.update_threads));
  }
  return absl::OkStatus();
}

int UpdateThreads(int requested) {
  if (requested > 0) return requested;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 8);
}
}  // namespace

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(
    ShardServerOptions options, std::unique_ptr<Transport> transport) {
  if (transport == nullptr) return absl::InvalidArgumentError("a transport is required");
  TESSEL_RETURN_IF_ERROR(Validate(options));
  std::unique_ptr<ShardServer> server(new ShardServer(std::move(options), std::move(transport)));
  TESSEL_RETURN_IF_ERROR(server->Init());
  return server;
}

ShardServer::ShardServer(ShardServerOptions options, std::unique_ptr<Transport> transport)
    : options_(std::move(options)), transport_(std::move(transport)) {}

ShardServer::~ShardServer() { Stop(/*drain=*/false); }

absl::Status ShardServer::Init() {
  // TLS first: a bad certificate path fails before anything is started.
  TESSEL_ASSIGN_OR_RETURN(auto server_credentials, LoadServerCredentials(options_.tls));
  TESSEL_ASSIGN_OR_RETURN(auto client_credentials, LoadClientCredentials(options_.tls));

  std::unique_ptr<CheckpointStore> store;
  if (!options_.checkpoint_dir.empty()) {
    store =
        std::make_unique<LocalFsStore>(options_.checkpoint_dir, options_.checkpoint_write_delay);
  }
  checkpointer_ = std::make_unique<Checkpointer>(std::move(store), absl::Minutes(10),
                                                 options_.checkpoint_max_queued);
  ShardServiceOptions service_options;
  service_options.shard_index = options_.shard;
  service_options.pool = options_.pool;
  service_options.auth = options_.admin;
  service_options.security = options_.security;
  jobs_ = std::make_unique<JobTable>(checkpointer_.get(), transport_->payload_memory(),
                                     options_.fold_prefix);
  metrics_ = std::make_unique<ServerMetrics>(options_.shard);
  if (!options_.timeline.empty()) {
    TESSEL_ASSIGN_OR_RETURN(
        timeline_,
        Timeline::Open(TimelinePath(options_.timeline, -1, options_.shard),
                       absl::StrCat("server[", options_.shard, "]"), options_.timeline_window));
  }
  const int update_threads = UpdateThreads(options_.update_threads);
  frame_keys_ = std::make_unique<FrameKeys>(options_.data_auth, options_.data_integrity_payload);
  plane_ = std::make_unique<DataPlane>(transport_.get(), jobs_.get(), checkpointer_.get(),
                                       metrics_.get(), timeline_.get(), update_threads,
                                       options_.update_spin, options_.poll_mode,
                                       options_.inline_update_max_bytes, frame_keys_.get());
  metrics_watch_ = metrics_->Watch(
      jobs_.get(), [plane = plane_.get()] { return plane->update_queue_depth(); },
      checkpointer_.get());
  // Made before the service, which asks it who holds a worker rank now
  // (GetFrameKey's handovers); it joins below.
  registry_ = std::make_unique<RegistryClient>(options_.registry, client_credentials,
                                               options_.registry_token);
  service_ = std::make_unique<ShardService>(jobs_.get(), transport_.get(), service_options,
                                            frame_keys_.get(), registry_.get());
  if (options_.stall_report > absl::ZeroDuration()) {
    stall_watcher_ =
        std::make_unique<StallWatcher>([this] { return jobs_->Jobs(); }, options_.stall_report);
  }
  // Health first: liveness answers (and readiness says NOT_SERVING) while
  // the server starts and joins.
  health_ = std::make_unique<HealthReporter>(std::vector<std::string>{"tessel.v1.ShardServer"});
  TESSEL_RETURN_IF_ERROR(health_->Listen(options_.health_listen));
  TESSEL_ASSIGN_OR_RETURN(grpc_server_,
                          StartGrpcServer(options_.listen, {service_.get()}, &grpc_address_,
                                          server_credentials, options_.advertise_address));
  health_->Attach(grpc_server_.get());

  v1::Member me;
  me.set_group(options_.pool);
  me.set_role(v1::ROLE_SERVER);
  me.set_rank(options_.shard);
  me.set_grpc_address(grpc_address_);
  me.set_ucx_address(transport_->address());
  // A server restarted after a crash finds its old lease still live until it
  // lapses, and a server started with (or before) its registry finds nobody
  // listening yet (pods of a deployment start in any order): keep trying for
  // a while instead of failing.
  auto cancelled = [this] { return options_.cancelled && options_.cancelled(); };
  const absl::Time join_deadline = absl::Now() + options_.join_timeout;
  auto view = registry_->Join(me, options_.lease_ttl);
  bool logged = false;
  while (!view.ok() &&
         (absl::IsAlreadyExists(view.status()) || absl::IsUnavailable(view.status()) ||
          absl::IsDeadlineExceeded(view.status())) &&
         absl::Now() < join_deadline && !cancelled()) {
    if (!logged) {
      logged = true;
      health_->SetReady(false, absl::StrCat("starting: waiting to join the registry at ",
                                            options_.registry, " (", view.status().message(), ")"));
      TESSEL_LOG(WARNING) << "cannot join the registry at " << options_.registry << " yet ("
                          << view.status().message() << "); trying again for up to "
                          << absl::FormatDuration(options_.join_timeout) << " (--join_timeout_s)";
    }
    absl::SleepFor(absl::Milliseconds(absl::IsAlreadyExists(view.status()) ? 100 : 250));
    view = registry_->Join(me, options_.lease_ttl);
  }
  TESSEL_RETURN_IF_ERROR(view);
  TESSEL_LOG(INFO)
      << "shard " << options_.shard << " of pool '" << options_.pool << "' serving control on "
      << grpc_address_ << (options_.tls.enabled() ? " (mutual TLS)" : " (plaintext)")
      << (options_.security.empty() ? "" : absl::StrCat(", callers: ", options_.security))
      << ", data over " << (transport_->name() == "ucx" ? std::string("UCX") : transport_->name())
      << (!options_.data_auth               ? " (frames not authenticated)"
          : options_.data_integrity_payload ? " (every frame authenticated, payloads included)"
                                            : " (every frame's header authenticated)")
      << ", " << UpdateThreads(options_.update_threads) << " update thread(s)";

  EndpointKeeperOptions keeper;
  keeper.probe_timeout = options_.receive_check_timeout;
  keeper.join_timeout = options_.join_timeout;
  keeper.lease_ttl = options_.lease_ttl;
  keeper.on_wedged = [this] { health_->SetReady(false, "renewing a wedged UCX endpoint"); };
  keeper_ = std::make_unique<EndpointKeeper>(transport_.get(), registry_.get(), me, keeper);
  StartStragglerWatcher();
  health_->SetReady(true, absl::StrCat("joined the registry as shard ", options_.shard));
  supervisor_ = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

void ShardServer::StartStragglerWatcher() {
  StragglerWatcherOptions o;
  o.shard = options_.shard;
  o.stall = options_.stall_report;
  o.dump_dir = options_.flight_dir;
  // Who a rank is: its host and pid as it joined the job's group.
  auto who = [registry = registry_.get()](const std::string& job, int registry_rank) {
    absl::StatusOr<v1::View> view = registry->GetView(job);
    if (!view.ok()) return std::string();
    for (const v1::Member& m : view->members()) {
      if (m.role() == v1::ROLE_WORKER && m.rank() == registry_rank) {
        return absl::StrCat("host ", m.host(), " pid ", m.pid());
      }
    }
    return std::string();
  };
  straggler_watcher_ = std::make_shared<StragglerWatcher>([this] { return jobs_->Jobs(); }, o, who);
  registry_->SetStragglerSource([w = straggler_watcher_, shard = options_.shard] {
    std::vector<v1::Straggler> out;
    for (const NamedStraggler& n : w->stragglers()) {
      v1::Straggler s;
      s.set_job(n.job);
      s.set_rank(n.rank);
      s.set_registry_rank(n.registry_rank);
      s.set_score(n.score);
      s.set_lateness_seconds(n.lateness_s);
      s.set_shard(shard);
      s.set_since_unix_ms(absl::ToUnixMillis(n.since));
      out.push_back(std::move(s));
    }
    return out;
  });
  straggler_watcher_->Start();
}

std::string ShardServer::transport_address() const { return transport_->address(); }

void ShardServer::Supervise() {
  const absl::Duration period = options_.receive_check_period;
  absl::Time next_check = absl::Now() + period;
  while (!stop_.WaitForNotificationWithTimeout(kSupervisePeriod)) {
    if (!registry_->lease_status().ok()) {
      if (options_.exit_on_lost_lease) {
        End(absl::UnavailableError("lost registry lease"));
        return;
      }
      if (!Rejoin()) return;
    }
    UpdateReadiness();
    if (period <= absl::ZeroDuration() || absl::Now() < next_check) continue;
    next_check = absl::Now() + period;
    absl::Status kept = keeper_->Check([this] { return stop_.HasBeenNotified(); });
    if (!kept.ok()) {
      End(kept);
      return;
    }
  }
}

void ShardServer::UpdateReadiness() {
  const absl::Duration silent = absl::Now() - registry_->last_contact();
  if (silent > options_.lease_ttl) {
    health_->SetReady(false,
                      absl::StrCat("cut off from the registry: no answer for ",
                                   absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1)))));
  } else {
    health_->SetReady(true, "in touch with the registry");
  }
}

bool ShardServer::Rejoin() {
  health_->SetReady(false, "lost the registry lease; joining again");
  TESSEL_LOG(WARNING) << "the registry no longer knows this server's lease (the registry restarted "
                         "or declared the server dead); joining again as shard "
                      << options_.shard << " (jobs stay; workers recover as after a restart)";
  absl::Time next_report = absl::Now() + absl::Seconds(10);
  std::optional<absl::Time> held_since;  // since when a live member holds this shard
  for (;;) {
    auto view = registry_->Join(keeper_->member(), options_.lease_ttl);
    if (view.ok()) {
      TESSEL_LOG(INFO) << "joined the registry again at epoch " << view->epoch();
      health_->SetReady(true, "joined the registry again");
      return true;
    }
    // A live member holds this shard: a replacement started while this server
    // was cut off (a partition, a long stall) and keeps renewing its lease. A
    // join of ours whose answer was lost would lapse within one lease, so past
    // two the shard is someone else's: stand down rather than wait forever
    // beside the server the job now uses.
    if (absl::IsAlreadyExists(view.status())) {
      if (!held_since.has_value()) held_since = absl::Now();
      if (absl::Now() - *held_since > 2 * options_.lease_ttl) {
        End(absl::FailedPreconditionError(
            absl::StrCat("replaced while cut off from the registry: ", view.status().message(),
                         "; standing down")));
        return false;
      }
    } else {
      held_since.reset();
    }
    if (absl::Now() >= next_report) {
      TESSEL_LOG(WARNING) << "still joining the registry: " << view.status().message();
      next_report = absl::Now() + absl::Seconds(10);
    }
    if (stop_.WaitForNotificationWithTimeout(absl::Milliseconds(200))) return false;
  }
}

const std::string& ShardServer::health_address() const { return health_->health_address(); }

bool ShardServer::ready() const { return health_ != nullptr && health_->ready(); }

void ShardServer::End(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (!ended_.has_value()) ended_ = std::move(status);
}

absl::Status ShardServer::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<absl::Status>* ended) { return ended->has_value(); }, &ended_));
  return *ended_;
}

std::optional<absl::Status> ShardServer::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(
      absl::Condition(
          +[](std::optional<absl::Status>* ended) { return ended->has_value(); }, &ended_),
      timeout);
  return ended_;
}

void ShardServer::Shutdown() { Stop(/*drain=*/true); }

void ShardServer::Stop(bool drain) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  End(absl::OkStatus());
  stop_.Notify();
  if (supervisor_.joinable()) supervisor_.join();
  if (health_ != nullptr) health_->SetReady(false, "draining: the server is stopping");
  stall_watcher_.reset();
  if (straggler_watcher_ != nullptr) straggler_watcher_->Stop();
  metrics_watch_ = metrics::Registry::CollectorHandle();
  if (drain) {
    TESSEL_LOG(INFO) << "stopping; finishing checkpoint writes";
    if (checkpointer_ != nullptr) checkpointer_->Drain();
    if (registry_ != nullptr) {
      if (absl::Status left = registry_->Leave(); !left.ok()) {
        TESSEL_LOG(WARNING) << "shard " << options_.shard << " of pool '" << options_.pool
                            << "': leaving the registry failed (the lease lapses on its own): "
                            << left;
      }
    }
  }
  if (grpc_server_ != nullptr) {
    if (health_ != nullptr) health_->Detach(grpc_server_.get());
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  if (health_ != nullptr) health_->Shutdown();
  if (plane_ != nullptr) plane_->Stop();  // no update reads borrowed pushes any more
  transport_->Shutdown();
}

}  // namespace tessel
