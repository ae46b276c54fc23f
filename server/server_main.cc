// tessel-server: a shard server. Owns ranges of jobs' parameters and optimizer
// state, receives gradient buckets and serves parameters over UCX, and is
// controlled over gRPC. Joins the registry as shard `--shard` of `--pool`.
#include <algorithm>
#include <csignal>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/log.h"
#include "gpu/device.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"
#include "rpc/tls_flags.h"
#include "server/checkpoint_store.h"
#include "server/checkpointer.h"
#include "server/data_plane.h"
#include "server/shard_service.h"
#include "transport/ucx/ucx_transport.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port of the control gRPC service (port 0 picks a free port)");
ABSL_FLAG(std::string, registry, "", "host:port of the membership registry (required)");
ABSL_FLAG(std::string, pool, "default", "server pool to join; workers find servers by pool");
ABSL_FLAG(int, shard, -1, "this server's shard index within the pool (required, >= 0)");
ABSL_FLAG(int, lease_ttl_ms, 3000, "registry lease time-to-live, in milliseconds");
ABSL_FLAG(std::string, ucx_tls, "",
          "UCX transports (UCX_TLS), e.g. 'posix,sysv,self' or 'tcp'; empty = UCX default");
ABSL_FLAG(bool, ucx_peer_errors, false,
          "use UCX peer error handling (tcp only on one host; detects dead peers in UCX)");
ABSL_FLAG(bool, verbose, false, "log every refused frame");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "root of the checkpoint store, shared by every server of the pool (empty = "
          "checkpoints disabled)");
ABSL_FLAG(std::string, admin_token_file, "",
          "file holding the admin token; when set, state-changing RPCs need it");
ABSL_FLAG(bool, allow_anonymous_reads, true,
          "with an admin token: let read-only RPCs (stats, listings) through without it");
ABSL_FLAG(int, join_timeout_s, 30,
          "seconds to keep trying to join while a previous server of this shard still holds "
          "its lease (after a crash and restart)");
ABSL_FLAG(int, stall_report_s, 30,
          "log a WARNING naming the ranks and buckets a step waits for once it has been in "
          "progress this many seconds, and again every as many seconds while it stays stuck "
          "(0 = off)");
ABSL_FLAG(int, receive_check_ms, 1000,
          "every this many milliseconds, probe this server's own UCX receive queue; a "
          "worker killed while writing into it (shared memory) wedges it for good, and "
          "the server then re-creates its UCX endpoint at a new address and re-joins the "
          "registry, so workers reconnect and recover. 0 turns the check off");
ABSL_FLAG(int, receive_check_timeout_ms, 3000,
          "how long a probe may take before the receive queue counts as wedged");
ABSL_FLAG(int, checkpoint_max_queued, 8,
          "snapshots that may wait for the checkpoint writer (each a copy of a shard's state); "
          "when the disk falls that far behind, training on this server pauses until it catches "
          "up, which bounds memory and how far a recovery rolls back (0 = no bound)");
ABSL_FLAG(int, checkpoint_write_delay_ms, 0, "testing only: pause per MiB of checkpoint written");

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& message) {
  std::cerr << "tessel-server: " << message << "\n";
  return 1;
}

// Watches the data plane's jobs for stalled steps (a worker that died or
// hangs mid-step) and logs each job's StallReport. Owns one thread, which
// wakes every min(1 s, stall / 2); the destructor stops and joins it within
// one wake-up, on every exit path of main.
class StallWatcher {
 public:
  StallWatcher(tessel::DataPlane* plane, absl::Duration stall) : plane_(plane), stall_(stall) {
    thread_ = std::thread([this] { Run(); });
  }
  ~StallWatcher() {
    stop_.Notify();
    thread_.join();
  }

 private:
  void Run() {
    const absl::Duration period = std::min(absl::Seconds(1), stall_ / 2);
    while (!stop_.WaitForNotificationWithTimeout(period)) {
      for (const auto& job : plane_->Jobs()) {
        if (auto report = job->StallReport(absl::Now(), stall_)) {
          TESSEL_LOG(WARNING) << *report;
        }
      }
    }
  }

  tessel::DataPlane* const plane_;
  const absl::Duration stall_;
  absl::Notification stop_;
  std::thread thread_;
};

// The receive queue is wedged (`why`): leaves the registry, re-creates the
// UCX endpoint at a new address and joins again with it. Workers see the
// new address, reconnect and recover as after a server restart (the
// registry epoch moves twice). Jobs on this server stay; their recovery
// re-creates them from checkpoints.
absl::Status RenewEndpoint(tessel::UcxTransport* transport, tessel::RegistryClient* registry,
                           tessel::v1::Member* me, const absl::Status& why) {
  TESSEL_LOG(ERROR) << why.message()
                    << "; re-creating the UCX endpoint at a new address and re-joining the "
                       "registry, so every worker reconnects and recovers";
  absl::Status left = registry->Leave();
  if (!left.ok()) TESSEL_LOG(WARNING) << "leaving the registry: " << left.message();
  absl::Status reset = transport->Reset();
  if (!reset.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot re-create the UCX endpoint: ", reset.message()));
  }
  me->set_ucx_address(transport->address());
  const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  auto view = registry->Join(*me, absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms)));
  while (!view.ok() && absl::Now() < deadline && !g_stop) {
    absl::SleepFor(absl::Milliseconds(100));
    view = registry->Join(*me, absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms)));
  }
  if (!view.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot re-join the registry with the new UCX address: ", view.status().message()));
  }
  TESSEL_LOG(WARNING) << "UCX endpoint re-created; re-joined the registry at epoch "
                      << view->epoch();
  return absl::OkStatus();
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel shard server.\n\n"
      "Usage: tessel-server --registry=HOST:PORT --shard=N [--pool=default]\n"
      "                     [--listen=127.0.0.1:0] [--ucx_tls=posix,sysv,self]\n"
      "                     [--tls_ca=CA --tls_cert=CERT --tls_key=KEY] "
      "[--admin_token_file=FILE]\n"
      "                     [--stall_report_s=30]\n\n"
      "The server registers its gRPC and UCX addresses in the registry; workers\n"
      "find it there and create jobs on it. A step in progress for longer than\n"
      "--stall_report_s is logged (WARNING) with the ranks and buckets it waits for.\n"
      "Stop it with SIGINT or SIGTERM.");
  absl::ParseCommandLine(argc, argv);
  const int shard = absl::GetFlag(FLAGS_shard);
  const std::string registry_address = absl::GetFlag(FLAGS_registry);
  if (registry_address.empty()) return Fail("--registry is required (host:port)");
  if (shard < 0) return Fail("--shard is required and must be >= 0");
  const int stall_report_s = absl::GetFlag(FLAGS_stall_report_s);
  if (stall_report_s < 0) {
    std::cerr << "tessel-server: --stall_report_s must be >= 0 (0 turns stall reports off); got "
              << stall_report_s << "\n";
    return 2;
  }
  tessel::SetLogLabel(absl::StrCat("server[", shard, "]"));
  if (absl::GetFlag(FLAGS_verbose)) tessel::SetMinLogLevel(tessel::LogLevel::kDebug);

  const tessel::CudaInfo cuda = tessel::DetectCuda();
  TESSEL_LOG(INFO) << (cuda.available
                           ? "CUDA device: " + cuda.reason
                           : "CUDA: " + cuda.reason + "; optimizer kernels run on the CPU path");

  // TLS first: a bad certificate path fails before anything is started.
  const tessel::TlsOptions tls = tessel::TlsOptionsFromFlags();
  auto server_credentials = tessel::LoadServerCredentials(tls);
  if (!server_credentials.ok()) return Fail(std::string(server_credentials.status().message()));
  auto client_credentials = tessel::LoadClientCredentials(tls);
  if (!client_credentials.ok()) return Fail(std::string(client_credentials.status().message()));

  tessel::UcxOptions ucx;
  ucx.tls = absl::GetFlag(FLAGS_ucx_tls);
  ucx.peer_error_handling = absl::GetFlag(FLAGS_ucx_peer_errors);
  auto transport = tessel::UcxTransport::Create(ucx);
  if (!transport.ok()) return Fail(std::string(transport.status().message()));
  std::unique_ptr<tessel::CheckpointStore> store;
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    store = std::make_unique<tessel::LocalFsStore>(
        absl::GetFlag(FLAGS_checkpoint_dir),
        absl::Milliseconds(absl::GetFlag(FLAGS_checkpoint_write_delay_ms)));
  }
  if (absl::GetFlag(FLAGS_checkpoint_max_queued) < 0) {
    std::cerr << "tessel-server: --checkpoint_max_queued must be >= 0\n";
    return 2;
  }
  tessel::Checkpointer checkpointer(std::move(store), absl::Minutes(10),
                                    absl::GetFlag(FLAGS_checkpoint_max_queued));
  tessel::ShardServiceOptions service_options;
  service_options.shard_index = shard;
  service_options.pool = absl::GetFlag(FLAGS_pool);
  service_options.allow_anonymous_reads = absl::GetFlag(FLAGS_allow_anonymous_reads);
  if (!absl::GetFlag(FLAGS_admin_token_file).empty()) {
    auto token = tessel::ReadTokenFile("--admin_token_file", absl::GetFlag(FLAGS_admin_token_file));
    if (!token.ok()) return Fail(std::string(token.status().message()));
    service_options.admin_token = *token;
  }
  tessel::DataPlane plane(transport->get(), &checkpointer);
  tessel::ShardService service(&plane, service_options);
  std::unique_ptr<StallWatcher> stall_watcher;
  if (stall_report_s > 0) {
    stall_watcher = std::make_unique<StallWatcher>(&plane, absl::Seconds(stall_report_s));
  }
  std::string bound;
  auto server =
      tessel::StartGrpcServer(absl::GetFlag(FLAGS_listen), {&service}, &bound, *server_credentials);
  if (!server.ok()) return Fail(std::string(server.status().message()));

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  tessel::RegistryClient registry(registry_address, *client_credentials);
  tessel::v1::Member me;
  me.set_group(absl::GetFlag(FLAGS_pool));
  me.set_role(tessel::v1::ROLE_SERVER);
  me.set_rank(shard);
  me.set_grpc_address(bound);
  me.set_ucx_address((*transport)->address());
  // A server restarted after a crash finds its old lease still live until it
  // lapses: keep trying for a while instead of exiting.
  const absl::Time join_deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  auto view = registry.Join(me, absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms)));
  while (!view.ok() && absl::IsAlreadyExists(view.status()) && absl::Now() < join_deadline &&
         !g_stop) {
    absl::SleepFor(absl::Milliseconds(100));
    view = registry.Join(me, absl::Milliseconds(absl::GetFlag(FLAGS_lease_ttl_ms)));
  }
  if (!view.ok()) return Fail(std::string(view.status().message()));
  TESSEL_LOG(INFO) << "shard " << shard << " of pool '" << absl::GetFlag(FLAGS_pool)
                   << "' serving control on " << bound
                   << (tls.enabled() ? " (mutual TLS)" : " (plaintext)") << ", data over UCX";

  const int check_ms = absl::GetFlag(FLAGS_receive_check_ms);
  const absl::Duration check_timeout =
      absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_receive_check_timeout_ms)));
  absl::Time next_check = absl::Now() + absl::Milliseconds(check_ms);
  while (!g_stop) {
    absl::SleepFor(absl::Milliseconds(100));
    if (!registry.lease_status().ok()) {
      TESSEL_LOG(ERROR) << "lost registry lease; exiting so a supervisor restarts this server";
      return 2;
    }
    if (check_ms <= 0 || absl::Now() < next_check) continue;
    next_check = absl::Now() + absl::Milliseconds(check_ms);
    absl::Status queue = (*transport)->CheckReceiveQueue(check_timeout);
    if (queue.ok() || g_stop) continue;
    absl::Status renewed = RenewEndpoint(transport->get(), &registry, &me, queue);
    if (!renewed.ok()) {
      TESSEL_LOG(ERROR) << renewed.message() << "; exiting so a supervisor restarts this server";
      return 2;
    }
  }
  TESSEL_LOG(INFO) << "stopping; finishing checkpoint writes";
  checkpointer.Drain();
  absl::Status left = registry.Leave();
  (void)left;
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  (*transport)->Shutdown();
  return 0;
}
