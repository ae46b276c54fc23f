// tessel-server: a shard server. Owns ranges of jobs' parameters and optimizer
// state, receives gradient buckets and serves parameters over UCX, and is
// controlled over gRPC. Joins the registry as shard `--shard` of `--pool`.
#include <algorithm>
#include <csignal>
#include <iostream>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "gpu/detect.h"
#include "rpc/auth.h"
#include "rpc/auth_flags.h"
#include "rpc/metrics_server.h"
#include "rpc/registry_flags.h"
#include "rpc/tls_flags.h"
#include "rpc/token_flag.h"
#include "runtime/flag_config.h"
#include "runtime/hostname.h"
#include "runtime/log.h"
#include "runtime/timeline_flags.h"
#include "server/data_plane.h"
#include "server/shard_server.h"
#include "transport/ucx/ucx_flags.h"
#include "transport/ucx/ucx_transport.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "host:port of the control gRPC service (port 0 picks a free port)");
ABSL_FLAG(std::string, pool, "default", "server pool to join; workers find servers by pool");
ABSL_FLAG(int, shard, -1,
          "this server's shard index within the pool (>= 0; required unless "
          "--shard_from_hostname)");
ABSL_FLAG(bool, shard_from_hostname, false,
          "take the shard index from the trailing -N of $HOSTNAME (else the host name): the "
          "pod ordinal of a Kubernetes StatefulSet, e.g. tessel-server-1 is shard 1");
ABSL_FLAG(std::string, advertise_address, "",
          "host registered for this server's gRPC address (what other hosts dial); default: "
          "the --listen host, or for a wildcard --listen (0.0.0.0) $POD_IP, else this host's "
          "first non-loopback IPv4 address; never 127.0.0.1 for a wildcard");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext gRPC listener serving only grpc.health.v1, for Kubernetes "
          "probes (also under mutual TLS): service \"\" is readiness (SERVING only while joined "
          "and in touch with the registry), service \"liveness\" answers while the process "
          "does; empty = none (the service port answers the same)");
ABSL_FLAG(bool, exit_on_lost_lease, false,
          "exit (status 2) when the registry no longer knows this server's lease, for a "
          "supervisor to restart it; by default the server keeps its jobs and joins again "
          "(a restarted memory registry, or an eviction) and workers recover");
ABSL_FLAG(int, update_threads, 0,
          "threads that reduce and update complete gradient buckets, different buckets of a step "
          "at once, and a large bucket (512Ki elements and up) split over those free "
          "(0: half this machine's cores, 1 to 8; at most 256)");
ABSL_FLAG(int64_t, update_spin_us, absl::ToInt64Microseconds(tessel::kDefaultUpdateSpin),
          "an update thread out of work polls for the next bucket (yielding the CPU) this many "
          "microseconds before it sleeps; 0: sleep at once");
ABSL_FLAG(int64_t, inline_update_max_bytes, 1 << 20,
          "buckets of at most this many bytes (4 per parameter) are reduced, updated and served "
          "on the UCX progress thread as their last push lands, skipping the hand-offs to an "
          "update thread and back (latency of small buckets); 0: every bucket goes to the "
          "update threads");
ABSL_FLAG(bool, fold_prefix, true,
          "with three or more workers, sum the ranks of a gradient bucket that arrived in rank "
          "order while the bucket waits for its last ranks (the same bits as summing all at the "
          "end); false only to measure what it saves");
ABSL_FLAG(bool, verbose, false, "log every refused frame");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "root of the checkpoint store, shared by every server of the pool (empty = "
          "checkpoints disabled)");
ABSL_FLAG(int, join_timeout_s, 30,
          "seconds to keep trying to join the registry while a previous server of this shard "
          "still holds its lease (after a crash and restart) or the registry is not reachable "
          "yet (started after this server)");
ABSL_FLAG(int, stall_report_s, 30,
          "log a WARNING naming the ranks and buckets a step waits for once it has been in "
          "progress this many seconds, and again every as many seconds while it stays stuck "
          "(0 = off)");
ABSL_FLAG(int, receive_check_ms, 1000,
          "every this many milliseconds, probe this server's own UCX receive queue; a "
          "worker killed while writing into it (shared memory) wedges it for good, and "
          "the server then re-creates its UCX endpoint at a new address and re-joins the "
          "registry, so workers reconnect and recover. 0 turns the check off");
ABSL_FLAG(int, receive_check_timeout_ms,
          static_cast<int>(absl::ToInt64Milliseconds(tessel::kReceiveQueueProbeTimeout)),
          "how long a probe may take before the receive queue counts as wedged (a late probe "
          "while messages keep arriving is load, not a wedge: never renewed)");
ABSL_FLAG(int, checkpoint_max_queued, 8,
          "snapshots that may wait for the checkpoint writer (each a copy of a shard's state); "
          "when the disk falls that far behind, training on this server pauses until it catches "
          "up, which bounds memory and how far a recovery rolls back (0 = no bound)");
ABSL_FLAG(int, checkpoint_write_delay_ms, 0, "testing only: pause per MiB of checkpoint written");
ABSL_FLAG(std::string, data_auth, "auto",
          "authenticate the data path: every UCX frame of a job carries a tag made with the job's "
          "key, which only its workers get (GetFrameKey, over the control plane); frames without "
          "a valid tag are dropped and counted (tessel_server_frames_refused_total{reason="
          "\"unauthenticated\"}). on, off, or auto: on whenever callers are authenticated "
          "(token files, --cert_roles or --tls_*), off with --insecure. docs/security.md");
ABSL_FLAG(std::string, data_integrity, "header",
          "with --data_auth on: what each frame's tag covers. header: the 64-byte header (who "
          "sent it, for which job, epoch, step and bucket); the payload (gradients, parameters) "
          "is not covered. payload: the payload too (Poly1305 under a one-time key per frame), "
          "checked before anything is summed or used; frames whose payload changed in flight "
          "are dropped and counted (tessel_server_frames_refused_total{reason=\"bad_payload\"}). "
          "Every worker of a job learns it from GetFrameKey; workers from before it are "
          "refused. Cost (2-core machine, 2 workers, 2 shards, medians): header tags are within "
          "the noise; payload tags make a step 2.0x as long at 1 MiB, 3.4x at 16 MiB and 3.0x "
          "at 64 MiB (CPU per step +200 %), so the default is header (docs/performance.md, "
          "\"Data-path authentication: what it costs\")");

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const std::string& message) {
  std::cerr << "tessel-server: " << message << "\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel shard server.\n\n"
      "Usage: tessel-server --registry=HOST:PORT --shard=N [--pool=default]\n"
      "                     [--listen=127.0.0.1:0] [--ucx_tls=posix,sysv,self]\n"
      "                     [--tls_ca=CA --tls_cert=CERT --tls_key=KEY] "
      "[--admin_token_file=FILE]\n"
      "                     [--stall_report_s=30]\n"
      "       tessel-server --config=tessel.json --shard_from_hostname \\\n"
      "                     --advertise_address=$(POD_IP)      (Kubernetes; deploy/)\n\n"
      "The server registers its gRPC and UCX addresses in the registry; workers\n"
      "find it there and create jobs on it. A step in progress for longer than\n"
      "--stall_report_s is logged (WARNING) with the ranks and buckets it waits for.\n"
      "Readiness (grpc.health.v1, also on --health_listen) is SERVING only while the\n"
      "server is joined and in touch with the registry. A lost lease (a restarted\n"
      "memory registry) makes it join again; its jobs stay and workers recover.\n"
      "Stop it with SIGINT or SIGTERM.");
  tessel::ParseCommandLineWithConfig(argc, argv, "server");
  int shard = absl::GetFlag(FLAGS_shard);
  if (absl::GetFlag(FLAGS_shard_from_hostname)) {
    auto ordinal = tessel::OrdinalFromHostname();
    if (!ordinal.ok()) return Fail(std::string(ordinal.status().message()));
    if (shard >= 0 && shard != *ordinal) {
      return Fail(
          absl::StrCat("--shard=", shard, " contradicts --shard_from_hostname (", *ordinal, ")"));
    }
    shard = *ordinal;
  }
  absl::StatusOr<std::string> registry_address = tessel::RegistryAddressFromFlags();
  if (!registry_address.ok()) return Fail(std::string(registry_address.status().message()));
  absl::StatusOr<absl::Duration> lease_ttl = tessel::LeaseTtlFromFlags();
  if (!lease_ttl.ok()) return Fail(std::string(lease_ttl.status().message()));
  absl::StatusOr<tessel::TimelineFlags> timeline = tessel::TimelineFromFlags();
  if (!timeline.ok()) return Fail(std::string(timeline.status().message()));
  if (shard < 0) return Fail("--shard is required and must be >= 0 (or --shard_from_hostname)");
  const int stall_report_s = absl::GetFlag(FLAGS_stall_report_s);
  if (stall_report_s < 0) {
    std::cerr << "tessel-server: --stall_report_s must be >= 0 (0 turns stall reports off); got "
              << stall_report_s << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_checkpoint_max_queued) < 0) {
    std::cerr << "tessel-server: --checkpoint_max_queued must be >= 0\n";
    return 2;
  }
  tessel::SetLogLabel(absl::StrCat("server[", shard, "]"));
  tessel::SetLogContext({.shard = shard});
  if (absl::GetFlag(FLAGS_verbose)) tessel::SetMinLogLevel(tessel::LogLevel::kDebug);

  const tessel::CudaInfo cuda = tessel::DetectCuda();
  TESSEL_LOG(INFO) << (cuda.available
                           ? "CUDA device: " + cuda.reason
                           : "CUDA: " + cuda.reason + "; optimizer kernels run on the CPU path");

  tessel::ShardServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  options.health_listen = absl::GetFlag(FLAGS_health_listen);
  options.exit_on_lost_lease = absl::GetFlag(FLAGS_exit_on_lost_lease);
  options.registry = *registry_address;
  options.pool = absl::GetFlag(FLAGS_pool);
  options.shard = shard;
  options.lease_ttl = *lease_ttl;
  options.join_timeout = absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_max_queued = absl::GetFlag(FLAGS_checkpoint_max_queued);
  options.checkpoint_write_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_checkpoint_write_delay_ms));
  options.tls = tessel::TlsOptionsFromFlags();
  options.stall_report = absl::Seconds(stall_report_s);
  options.timeline = timeline->path;
  options.timeline_window = timeline->window;
  options.receive_check_period = absl::Milliseconds(absl::GetFlag(FLAGS_receive_check_ms));
  options.receive_check_timeout =
      absl::Milliseconds(std::max(1, absl::GetFlag(FLAGS_receive_check_timeout_ms)));
  options.update_threads = absl::GetFlag(FLAGS_update_threads);
  options.fold_prefix = absl::GetFlag(FLAGS_fold_prefix);
  if (absl::GetFlag(FLAGS_inline_update_max_bytes) < 0) {
    return Fail(
        absl::StrCat("--inline_update_max_bytes=", absl::GetFlag(FLAGS_inline_update_max_bytes),
                     " must be 0 (off) or more bytes"));
  }
  options.inline_update_max_bytes = absl::GetFlag(FLAGS_inline_update_max_bytes);
  std::max<int64_t>(0, absl::GetFlag(FLAGS_inline_update_max_bytes));
  options.update_spin =
      absl::Microseconds(std::max<int64_t>(0, absl::GetFlag(FLAGS_update_spin_us)));
  options.cancelled = [] { return g_stop != 0; };
  const std::string data_auth = absl::GetFlag(FLAGS_data_auth);
  if (data_auth != "auto" && data_auth != "on" && data_auth != "off") {
    return Fail(absl::StrCat("--data_auth=", data_auth, ": expected auto, on or off"));
  }
  const std::string data_integrity = absl::GetFlag(FLAGS_data_integrity);
  if (data_integrity != "header" && data_integrity != "payload") {
    return Fail(absl::StrCat("--data_integrity=", data_integrity, ": expected header or payload"));
  }
  // TLS first: a bad certificate path fails before anything is started
  // (ShardServer::Start loads the credentials again).
  auto server_credentials = tessel::LoadServerCredentials(options.tls);
  if (!server_credentials.ok()) return Fail(std::string(server_credentials.status().message()));
  auto client_credentials = tessel::LoadClientCredentials(options.tls);
  if (!client_credentials.ok()) return Fail(std::string(client_credentials.status().message()));
  tessel::AuthFlags auth_flags = tessel::AuthFlagsFromFlags();
  auth_flags.tls = options.tls.enabled();
  auto auth = tessel::LoadAuthOptions(auth_flags);
  if (!auth.ok()) return Fail(std::string(auth.status().message()));
  options.admin = *std::move(auth);
  auto posture = tessel::SecurityPostureOf(auth_flags, options.admin, "tessel-server");
  if (!posture.ok()) return Fail(std::string(posture.status().message()));
  options.security = posture->description;
  // The data path is authenticated wherever the control plane is: the frame
  // keys go only to callers the control plane let in.
  options.data_auth = data_auth == "on" || (data_auth == "auto" && posture->authenticated());
  if (data_integrity == "payload" && !options.data_auth) {
    return Fail(
        "--data_integrity=payload tags payloads under the data-path frame keys, and data-path "
        "authentication is off here (--data_auth=off, or --insecure with --data_auth=auto): "
        "add --data_auth=on, or drop --data_integrity");
  }
  options.data_integrity_payload = data_integrity == "payload";
  if (posture->insecure) {
    TESSEL_LOG(WARNING) << "running INSECURE (--insecure): no credentials, so every RPC is open "
                           "to anyone who can reach this server"
                        << (options.data_auth ? "" : " and data-path frames are not authenticated")
                        << " (docs/security.md)";
  }
  if (options.data_auth && !options.tls.enabled()) {
    TESSEL_LOG(WARNING) << "data-path authentication is on without TLS: each job's frame key "
                           "reaches its workers over plaintext gRPC (GetFrameKey), so anyone who "
                           "can watch this network can read the key and forge or alter frames; "
                           "add --tls_ca, --tls_cert and --tls_key (docs/security.md)";
  }
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    auto token = tessel::ReadTokenFile("--token_file", absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) return Fail(std::string(token.status().message()));
    options.registry_token = *token;
  }

  // Metrics before the server: a taken --metrics_address fails before it joins.
  auto metrics_http = tessel::StartMetricsServerFromFlags({}, {options.admin.token});
  if (!metrics_http.ok()) return Fail(std::string(metrics_http.status().message()));

  absl::StatusOr<tessel::UcxOptions> ucx = tessel::UcxOptionsFromFlags();
  if (!ucx.ok()) return Fail(std::string(ucx.status().message()));
  options.poll_mode = ucx->poll_mode;
  auto transport = tessel::UcxTransport::Create(*ucx);
  if (!transport.ok()) return Fail(std::string(transport.status().message()));
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto server = tessel::ShardServer::Start(std::move(options), std::move(*transport));
  if (!server.ok()) return Fail(std::string(server.status().message()));

  std::optional<absl::Status> ended;
  while (!g_stop && !(ended = (*server)->WaitFor(absl::Milliseconds(100)))) {
  }
  if (ended.has_value() && !ended->ok()) {
    TESSEL_LOG(ERROR) << ended->message() << "; exiting so a supervisor restarts this server";
    return 2;
  }
  (*server)->Shutdown();
  return 0;
}
