// tessel-registry: the membership registry as a standalone process, over the
// in-memory backend or etcd.
#include <csignal>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "registry/etcd/etcd_registry.h"
#include "registry/memory/memory_registry.h"
#include "registry/registry_service.h"
#include "registry/status_page.h"
#include "rpc/auth.h"
#include "rpc/auth_flags.h"
#include "rpc/grpc_util.h"
#include "rpc/health.h"
#include "rpc/lease_flags.h"
#include "rpc/metrics_server.h"
#include "rpc/tls_flags.h"
#include "runtime/flag_config.h"
#include "runtime/log.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port for the Registry gRPC service (port 0 picks a free port)");
ABSL_FLAG(std::string, advertise_address, "",
          "host in the address this registry reports (--port_file, logs); default: the "
          "--listen host, or for a wildcard --listen $POD_IP, else this host's first "
          "non-loopback IPv4 address");
ABSL_FLAG(std::string, health_listen, "",
          "host:port of a plaintext gRPC listener serving only grpc.health.v1, for Kubernetes "
          "probes (also under mutual TLS): service \"\" is readiness (SERVING while the "
          "backend answers: etcd reachable), \"liveness\" answers while the process does; "
          "empty = none (the service port answers the same)");
ABSL_FLAG(std::string, port_file, "", "if set, write the bound host:port to this file");
ABSL_FLAG(std::string, server_token_file, "",
          "file of shard-server tokens, one per line (tessel-server --token_file); when set, a "
          "Join as a shard server needs one (or the admin token), and GetView/Watch need a "
          "credential");
ABSL_FLAG(std::string, backend, "memory",
          "where membership lives: 'memory' (this process; lost on exit) or 'etcd' (durable, "
          "shared by several registry processes)");
ABSL_FLAG(std::string, etcd_endpoints, "127.0.0.1:2379",
          "with --backend=etcd: comma-separated host:port of etcd client URLs; https://host:port "
          "means TLS, http://host:port plaintext");
ABSL_FLAG(std::string, etcd_prefix, "/tessel",
          "with --backend=etcd: key prefix of this deployment's state in etcd");
ABSL_FLAG(int, etcd_timeout_ms, 5000, "with --backend=etcd: deadline of every etcd call");
ABSL_FLAG(std::string, etcd_tls_ca, "",
          "with --backend=etcd: PEM CA that issued etcd's server certificate; dials etcd over "
          "TLS and verifies it (https:// endpoints without this flag trust the system's roots)");
ABSL_FLAG(std::string, etcd_tls_cert, "",
          "with --backend=etcd: PEM client certificate to present to etcd (for etcd's "
          "--client-cert-auth); needs --etcd_tls_key");
ABSL_FLAG(std::string, etcd_tls_key, "",
          "with --backend=etcd: the unencrypted PEM private key of --etcd_tls_cert");
ABSL_FLAG(int, health_check_period_ms, 2000,
          "ask every member with a gRPC address grpc.health.v1 Check this often (0 = never)");
ABSL_FLAG(int, health_check_timeout_ms, 1000, "deadline of one health check");
ABSL_FLAG(int, health_check_failure_threshold, 3,
          "evict a member after this many consecutive failed health checks");

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel membership registry: members join with a lease, heartbeat to keep it, and\n"
      "watchers see every change as a new epoch. Members that publish a gRPC address\n"
      "(shard servers) are also health-checked (grpc.health.v1) and evicted after\n"
      "--health_check_failure_threshold consecutive failures.\n\n"
      "Usage:\n"
      "  tessel-registry --listen=127.0.0.1:7070 [--lease_ttl_ms=3000]\n"
      "  tessel-registry --backend=etcd --etcd_endpoints=10.0.0.5:2379,10.0.0.6:2379 \\\n"
      "      --etcd_prefix=/tessel\n"
      "  tessel-registry --backend=etcd --etcd_endpoints=https://10.0.0.5:2379 \\\n"
      "      --etcd_tls_ca=etcd-ca.crt [--etcd_tls_cert=C --etcd_tls_key=K]\n\n"
      "With --backend=memory (default) membership and epochs live in this process and\n"
      "start again from zero when it restarts. With --backend=etcd they live in etcd\n"
      "under --etcd_prefix: members are keys bound to etcd leases (heartbeats are lease\n"
      "keepalives), epochs never go backwards across registry restarts, and several\n"
      "registry processes may serve the same prefix. See docs/operations.md.\n\n"
      "etcd over TLS: --etcd_tls_ca (or an https:// endpoint; without --etcd_tls_ca the\n"
      "system's roots verify etcd) turns TLS on; --etcd_tls_cert/--etcd_tls_key (together)\n"
      "add a client certificate for etcd's --client-cert-auth. They are separate from\n"
      "--tls_*, which secure this registry's own service.\n\n"
      "Security: --tls_ca/--tls_cert/--tls_key serve mutual TLS (health checks use the\n"
      "same certificates); --admin_token_file gates ListGroups (docs/operations.md).");
  tessel::ParseCommandLineWithConfig(argc, argv, "registry");
  tessel::SetLogLabel("registry");
  const std::string backend = absl::GetFlag(FLAGS_backend);
  tessel::TlsOptions etcd_tls;
  etcd_tls.ca_file = absl::GetFlag(FLAGS_etcd_tls_ca);
  etcd_tls.cert_file = absl::GetFlag(FLAGS_etcd_tls_cert);
  etcd_tls.key_file = absl::GetFlag(FLAGS_etcd_tls_key);
  if (etcd_tls.enabled() && backend != "etcd") {
    std::cerr << "tessel-registry: --etcd_tls_ca, --etcd_tls_cert and --etcd_tls_key secure the "
                 "connection to etcd and need --backend=etcd (for this registry's own service "
                 "use --tls_ca, --tls_cert and --tls_key)\n";
    return 2;
  }
  tessel::AuthFlags auth_flags = tessel::AuthFlagsFromFlags();
  auth_flags.server_token_file = absl::GetFlag(FLAGS_server_token_file);
  auth_flags.tls = tessel::TlsOptionsFromFlags().enabled();
  auto auth = tessel::LoadAuthOptions(auth_flags);
  if (!auth.ok()) {
    std::cerr << "tessel-registry: " << auth.status().message() << "\n";
    return 1;
  }
  auto credentials = tessel::LoadServerCredentials(tessel::TlsOptionsFromFlags());
  if (!credentials.ok()) {
    std::cerr << "tessel-registry: " << credentials.status().message() << "\n";
    return 1;
  }
  auto posture = tessel::SecurityPostureOf(auth_flags, *auth, "tessel-registry");
  if (!posture.ok()) {
    std::cerr << "tessel-registry: " << posture.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<absl::Duration> lease_ttl = tessel::LeaseTtlFromFlags();
  if (!lease_ttl.ok()) {
    std::cerr << "tessel-registry: " << lease_ttl.status().message() << "\n";
    return 2;
  }
  const absl::Duration ttl = *lease_ttl;

  std::unique_ptr<tessel::Registry> registry;
  if (backend == "memory") {
    registry = std::make_unique<tessel::MemoryRegistry>(ttl);
  } else if (backend == "etcd") {
    tessel::EtcdRegistryOptions options;
    options.endpoints =
        absl::StrSplit(absl::GetFlag(FLAGS_etcd_endpoints), ',', absl::SkipWhitespace());
    options.prefix = absl::GetFlag(FLAGS_etcd_prefix);
    options.default_ttl = ttl;
    options.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_etcd_timeout_ms));
    if (etcd_tls.enabled()) {
      auto etcd_credentials = tessel::LoadTlsClientCredentials(
          etcd_tls, {.ca = "--etcd_tls_ca", .cert = "--etcd_tls_cert", .key = "--etcd_tls_key"});
      if (!etcd_credentials.ok()) {
        std::cerr << "tessel-registry: " << etcd_credentials.status().message() << "\n";
        return 2;
      }
      options.credentials = *etcd_credentials;
    }
    auto etcd = tessel::EtcdRegistry::Connect(options);
    if (!etcd.ok()) {
      std::cerr << "tessel-registry: " << etcd.status().message() << "\n";
      // A contradictory configuration is a usage error; etcd not answering is not.
      return etcd.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    registry = std::move(*etcd);
    const bool tls =
        etcd_tls.enabled() || absl::StrContains(absl::GetFlag(FLAGS_etcd_endpoints), "https://");
    TESSEL_LOG(INFO) << "membership in etcd at " << absl::GetFlag(FLAGS_etcd_endpoints)
                     << (tls ? " over TLS" : " (plaintext)") << " under " << options.prefix;
  } else {
    std::cerr << "tessel-registry: --backend must be 'memory' or 'etcd', got '" << backend << "'\n";
    return 2;
  }

  tessel::HealthCheckOptions health;
  health.period = absl::Milliseconds(absl::GetFlag(FLAGS_health_check_period_ms));
  health.timeout = absl::Milliseconds(absl::GetFlag(FLAGS_health_check_timeout_ms));
  health.failure_threshold = absl::GetFlag(FLAGS_health_check_failure_threshold);
  if (health.failure_threshold < 1 || health.timeout <= absl::ZeroDuration()) {
    std::cerr << "tessel-registry: --health_check_failure_threshold must be >= 1 and "
                 "--health_check_timeout_ms > 0\n";
    return 2;
  }
  auto client_credentials = tessel::LoadClientCredentials(tessel::TlsOptionsFromFlags());
  if (!client_credentials.ok()) {
    std::cerr << "tessel-registry: " << client_credentials.status().message() << "\n";
    return 1;
  }
  health.credentials = *client_credentials;
  const std::string admin_token = auth->token;  // may read the status page over the network
  tessel::RegistryService service(std::move(registry), health, *std::move(auth));
  // Readiness: SERVING while the backend answers (etcd reachable).
  tessel::HealthReporter readiness({"tessel.v1.Registry"});
  if (absl::Status s = readiness.Listen(absl::GetFlag(FLAGS_health_listen)); !s.ok()) {
    std::cerr << "tessel-registry: " << s.message() << "\n";
    return 1;
  }
  // The status page names the registry by its advertised address, known
  // once it listens; the page reads it on each request.
  std::string bound;
  tessel::StatusPage status(&service, health.credentials);
  status.SetSecurity(posture->description);
  auto metrics_http = tessel::StartMetricsServerFromFlags(status.Pages(), {admin_token});
  if (!metrics_http.ok()) {
    std::cerr << "tessel-registry: " << metrics_http.status().message() << "\n";
    return 1;
  }
  auto server = tessel::StartGrpcServer(absl::GetFlag(FLAGS_listen), {&service}, &bound,
                                        *credentials, absl::GetFlag(FLAGS_advertise_address));
  if (!server.ok()) {
    std::cerr << "tessel-registry: " << server.status().message() << "\n";
    return 1;
  }
  readiness.Attach(server->get());
  status.SetAddress(bound);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    FILE* f = std::fopen(absl::GetFlag(FLAGS_port_file).c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "%s\n", bound.c_str());
      std::fclose(f);
    }
  }
  TESSEL_LOG(INFO) << "registry (" << backend << ") listening on " << bound
                   << (tessel::TlsOptionsFromFlags().enabled() ? " (mutual TLS)" : " (plaintext)")
                   << ", callers: " << posture->description;
  if (posture->insecure) {
    TESSEL_LOG(WARNING) << "running INSECURE (--insecure): no credentials, so anyone who can "
                           "reach this registry can join, leave and list every group "
                           "(docs/security.md)";
  }
  if (health.period > absl::ZeroDuration()) {
    TESSEL_LOG(INFO) << "health checks every " << absl::FormatDuration(health.period)
                     << ", timeout " << absl::FormatDuration(health.timeout) << ", evict after "
                     << health.failure_threshold << " failures";
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // The backend check runs on its own thread: an etcd call may take up to
  // --etcd_timeout_ms, and a signal must still stop the registry at once.
  absl::Notification stopping;
  std::thread backend_check([&] {
    do {
      auto members = service.registry().ListMembers();
      readiness.SetReady(members.ok(), members.ok() ? backend + " backend answers"
                                                    : "backend unreachable: " +
                                                          std::string(members.status().message()));
    } while (!stopping.WaitForNotificationWithTimeout(absl::Seconds(1)));
  });
  while (!g_stop) absl::SleepFor(absl::Milliseconds(100));
  stopping.Notify();
  backend_check.join();
  readiness.SetReady(false, "draining: the registry is stopping");
  readiness.Detach(server->get());
  service.Stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return 0;
}
