// tessel-launch: torchrun for Tessel. Starts an embedded registry and shard
// servers on this host (or uses a running registry), then N copies of a
// worker command with their rank, world size and the registry's address in
// the environment; restarts failed workers within a budget and stops
// everything it started on the way out (docs/launch.md).
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "rpc/metrics_server.h"
#include "runtime/cli.h"
#include "runtime/flag_config.h"
#include "runtime/log.h"
#include "testing/cluster_flags.h"
#include "testing/local_cluster.h"
#include "tools/internal/launch.h"

ABSL_FLAG(int, nproc_per_node, 1,
          "worker processes to start on this host (ranks node_rank*N .. node_rank*N + N-1)");
ABSL_FLAG(int, nnodes, 1,
          "hosts in the job (as torchrun's): each runs tessel-launch with the same --nnodes, "
          "--nproc_per_node, --job and --registry and its own --node_rank; the world is "
          "nnodes x nproc_per_node. More than 1 needs --registry (a registry every host reaches)");
ABSL_FLAG(int, node_rank, 0, "this host's index in [0, nnodes) (as torchrun's)");
ABSL_FLAG(int, servers, 1,
          "shard server processes to start on this host (with --registry: none are started "
          "and TESSEL_NUM_SERVERS is 0, every server of the pool)");
ABSL_FLAG(std::string, registry, "",
          "host:port of a running tessel-registry whose shard servers the workers use; empty = "
          "start an embedded registry and --servers shard servers here");
ABSL_FLAG(std::string, job, "default-job", "job name, given to the workers as TESSEL_JOB");
ABSL_FLAG(int, max_restarts, 0,
          "restarts of failed workers allowed on this host (as torchrun's): a worker that "
          "exits non-zero or dies of a signal is started again, same rank and command, with "
          "TESSEL_RESTART_COUNT raised, while restarts remain");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "checkpoint root for the shard servers started here (their --checkpoint_dir); empty = "
          "no checkpoints");
ABSL_FLAG(int, timeout_s, 0,
          "stop everything and exit 124 when the workers have not all finished after this many "
          "seconds (0 = no limit)");
ABSL_FLAG(std::string, run_dir, "",
          "folder for the logs (workerR.log, serverS.log) and TESSEL_RUN_DIR; empty = a new "
          "folder tessel-launch-XXXXXX under $TMPDIR");

namespace {
volatile std::sig_atomic_t g_signal = 0;
void OnSignal(int sig) {
  if (g_signal == 0) g_signal = sig;
}

// Bad input: nothing has been started.
int UsageError(const std::string& message) {
  std::cerr << "tessel-launch: " << message << "\n"
            << "usage: tessel-launch --nproc_per_node=N --servers=S [flags] -- COMMAND ARGS... "
               "(--help lists the flags)\n";
  return 2;
}

int Interrupted() {
  std::cerr << "tessel-launch: interrupted by signal " << g_signal << " (" << strsignal(g_signal)
            << "): stopped every process started\n";
  return 128 + g_signal;
}

std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return absl::StrCat(cwd, "/", path);
}

// --help, --helpfull, --version and the like: answered without a command.
bool AsksForHelp(const std::vector<char*>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    absl::string_view a = args[i];
    absl::ConsumePrefix(&a, "-");
    absl::ConsumePrefix(&a, "-");
    if (absl::StartsWith(a, "help") || a == "h" || a == "version" || a == "only_check_args") {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Starts a Tessel job's worker processes on this host, as torchrun does.\n\n"
      "Usage: tessel-launch --nproc_per_node=N --servers=S [--registry=HOST:PORT] [--job=NAME]\n"
      "                     [--max_restarts=K] [--checkpoint_dir=DIR] [--config=FILE]\n"
      "                     [--timeout_s=T] [--run_dir=DIR] -- COMMAND ARGS...\n"
      "  many hosts: tessel-launch --nnodes=M --node_rank=K --nproc_per_node=N\n"
      "                     --registry=HOST:PORT --job=NAME -- COMMAND ARGS...   (on each host)\n\n"
      "Without --registry it starts an embedded registry and S shard servers here. Then it\n"
      "starts N copies of COMMAND ARGS (looked up on PATH) with TESSEL_REGISTRY, TESSEL_JOB,\n"
      "TESSEL_RANK, TESSEL_WORLD_SIZE, TESSEL_NUM_SERVERS, TESSEL_RESTART_COUNT,\n"
      "TESSEL_RUN_DIR, TESSEL_CONFIG (with --config), RANK, WORLD_SIZE, LOCAL_RANK,\n"
      "LOCAL_WORLD_SIZE, GROUP_RANK (the node rank) and PYTHONPATH (the tessel Python\n"
      "package first) in their\n"
      "environment. The first local rank's stdout is shown here; every worker's log is in\n"
      "the run folder.\n"
      "--config=FILE applies its \"common\" keys that are flags here, then its \"launch\"\n"
      "section; flags on the command line win. The shard servers started here read the same\n"
      "file (\"common\" and \"server\"), on loopback whatever its listen addresses say.\n\n"
      "Exit status: 0 when every worker exits 0; a failed worker's status (its exit code, or\n"
      "128+signal) once --max_restarts is used up; 130/143 on SIGINT/SIGTERM; 124 after\n"
      "--timeout_s; 1 when a shard server stops; 2 for bad input (nothing started).");
  tessel::SplitArgs split = tessel::SplitAtSeparator(argc, argv);
  if (!split.has_separator && !AsksForHelp(split.launcher)) {
    // Said before Abseil parses what may be the command's own flags.
    return UsageError("missing '--' and the worker command after it");
  }
  tessel::SetDefaultLogLevel(tessel::LogLevel::kWarning);  // the embedded registry's INFO lines
  std::vector<char*> positional = tessel::ParseCommandLineWithConfig(
      static_cast<int>(split.launcher.size()), split.launcher.data(), "launch");
  tessel::SetLogLabel("launch");

  if (positional.size() > 1) {
    return UsageError(absl::StrCat("unexpected argument '", positional[1],
                                   "' before '--': the worker command goes after '--'"));
  }
  if (!split.has_separator) return UsageError("missing '--' and the worker command after it");
  if (split.command.empty()) return UsageError("no worker command after '--'");
  const int nproc = absl::GetFlag(FLAGS_nproc_per_node);
  const int servers = absl::GetFlag(FLAGS_servers);
  const std::string registry = absl::GetFlag(FLAGS_registry);
  const int max_restarts = absl::GetFlag(FLAGS_max_restarts);
  const int timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const int nnodes = absl::GetFlag(FLAGS_nnodes);
  const int node_rank = absl::GetFlag(FLAGS_node_rank);
  if (nproc < 1 || nproc > 1024) return UsageError("--nproc_per_node must be in 1..1024");
  if (nnodes < 1 || nnodes > 4096) return UsageError("--nnodes must be in 1..4096");
  if (node_rank < 0 || node_rank >= nnodes) {
    return UsageError(absl::StrCat("--node_rank must be in [0, ", nnodes, ") (--nnodes=", nnodes,
                                   "), got ", node_rank));
  }
  if (nnodes > 1 && registry.empty()) {
    return UsageError(
        "--nnodes > 1 needs --registry=HOST:PORT: the registry (and shard servers) every host's "
        "workers use; an embedded one would serve this host only");
  }
  if (registry.empty() && (servers < 1 || servers > 64)) {
    return UsageError("--servers must be in 1..64 (or name a running registry with --registry)");
  }
  if (max_restarts < 0) return UsageError("--max_restarts must be >= 0");
  if (timeout_s < 0) return UsageError("--timeout_s must be >= 0 (0 = no limit)");
  if (absl::GetFlag(FLAGS_job).empty()) return UsageError("--job must not be empty");
  const char* path_env = std::getenv("PATH");
  auto command = tessel::ResolveCommand(split.command[0], path_env != nullptr ? path_env : "");
  if (!command.ok()) return UsageError(std::string(command.status().message()));

  tessel::LaunchOptions options;
  options.nproc_per_node = nproc;
  options.nnodes = nnodes;
  options.node_rank = node_rank;
  options.job = absl::GetFlag(FLAGS_job);
  options.max_restarts = max_restarts;
  options.config = Absolute(
      tessel::FindConfigArg(static_cast<int>(split.launcher.size()), split.launcher.data()));
  options.python_root = tessel::FindPythonPackageRoot();
  if (const char* p = std::getenv("PYTHONPATH")) options.inherited_pythonpath = p;
  options.command = split.command;
  options.command[0] = *command;
  if (timeout_s > 0) options.timeout = absl::Seconds(timeout_s);
  if (!options.config.empty() && access(options.config.c_str(), R_OK) != 0) {
    return UsageError(absl::StrCat("--config: cannot read ", options.config));
  }
  if (!registry.empty()) {
    absl::Status reachable = tessel::CheckReachable(registry, absl::Seconds(5));
    if (!reachable.ok()) return UsageError(std::string(reachable.message()));
  }
  options.run_dir = absl::GetFlag(FLAGS_run_dir).empty() ? tessel::MakeRunDir("tessel-launch")
                                                         : Absolute(absl::GetFlag(FLAGS_run_dir));
  if (access(options.run_dir.c_str(), W_OK) != 0 && mkdir(options.run_dir.c_str(), 0755) != 0) {
    return UsageError(absl::StrCat("--run_dir: cannot create ", options.run_dir));
  }

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  std::unique_ptr<tessel::LocalCluster> cluster;
  std::vector<tessel::HttpPage> status_pages;  // the embedded registry's /status
  if (registry.empty()) {
    tessel::ClusterOptions copt;
    copt.servers = servers;
    copt.run_dir = options.run_dir;
    if (!options.config.empty()) {
      // The servers read the file's "common" and "server" sections, but they
      // all run here: on loopback, on ports of their own, as shards 0..S-1.
      copt.server_args = {"--config=" + options.config, "--listen=127.0.0.1:0", "--health_listen=",
                          "--advertise_address=", "--shard_from_hostname=false"};
    }
    if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
      copt.server_args.push_back("--checkpoint_dir=" +
                                 Absolute(absl::GetFlag(FLAGS_checkpoint_dir)));
    }
    if (!absl::GetFlag(FLAGS_metrics_address).empty()) {
      // The servers serve theirs on free ports of the same host (their logs say which).
      const std::string a = absl::GetFlag(FLAGS_metrics_address);
      copt.server_args.push_back("--metrics_address=" + a.substr(0, a.rfind(':')) + ":0");
      for (std::string& f : tessel::MetricsAccessFlags()) copt.server_args.push_back(std::move(f));
    }
    options.ucx_tls = copt.ucx_tls;  // the workers talk to these servers as they do
    copt.insecure = tessel::InsecureClusterFromFlags();
    cluster = std::make_unique<tessel::LocalCluster>(copt);
    std::cerr << "tessel-launch: starting an embedded registry and " << servers
              << " shard server(s); logs in " << options.run_dir << "\n";
    absl::Status s = cluster->Start();
    if (g_signal != 0) {
      cluster->Stop();
      return Interrupted();
    }
    if (!s.ok()) {
      cluster->Stop();
      std::cerr << "tessel-launch: the shard servers did not start: " << s.message() << "\n";
      return 1;
    }
    options.registry = cluster->registry_address();
    options.num_servers = servers;
    if (const tessel::LaunchCredentials* c = cluster->credentials(); c != nullptr) {
      options.token_file = c->worker_token_file;
      std::cerr << "tessel-launch: this launch's credentials are in " << c->dir
                << " (workers get TESSEL_TOKEN_FILE; tesselctl --registry=" << options.registry
                << " --token_file=" << c->admin_token_file << ")\n";
    }
    auto pages = cluster->StatusPages();
    if (!pages.ok()) {
      cluster->Stop();
      return UsageError(std::string(pages.status().message()));
    }
    status_pages = *std::move(pages);
    std::cerr << "tessel-launch: registry at " << options.registry << ", " << servers
              << " shard server(s) registered (" << options.run_dir << "/server<S>.log)\n";
  } else {
    options.registry = registry;
    options.num_servers = 0;
    std::cerr << "tessel-launch: using the registry at " << registry
              << " and the shard servers registered there\n";
  }
  // --metrics_address: the launcher's own metrics (worker starts, failures,
  // restarts), its embedded registry's, and that registry's status page
  // (/status: members, jobs, steps per second, rank 0's loss curve).
  auto metrics_http = tessel::StartMetricsServerFromFlags(status_pages);
  if (!metrics_http.ok()) {
    if (cluster != nullptr) cluster->Stop();
    return UsageError(std::string(metrics_http.status().message()));
  }
  if (*metrics_http != nullptr) {
    std::cerr << "tessel-launch: metrics at http://" << (*metrics_http)->address() << "/metrics"
              << (!status_pages.empty() ? absl::StrCat(", status page at http://",
                                                       (*metrics_http)->address(), "/status")
                                        : "")
              << "\n";
  }
  const int first = options.GlobalRank(0);
  std::cerr << "tessel-launch: job '" << options.job << "': " << nproc << " worker(s) of "
            << absl::StrJoin(options.command, " ")
            << (nnodes > 1 ? absl::StrCat(" (node ", node_rank, " of ", nnodes, ": ranks ", first,
                                          "..", first + nproc - 1, " of ", nnodes * nproc, ")")
                           : "")
            << "; rank " << first << "'s stdout follows, its stderr and "
            << "the other ranks' output are in " << options.run_dir << "/worker<R>.log\n"
            << std::flush;

  tessel::WorkerSupervisor workers(options, cluster ? &cluster->processes() : nullptr, &std::cerr);
  tessel::LaunchResult result = workers.Run(&g_signal);
  workers.StopAll();
  if (cluster != nullptr) cluster->Stop();
  std::cout << std::flush;
  if (result.exit_code == 0) {
    std::cerr << "tessel-launch: all " << nproc << " worker(s) exited 0"
              << (workers.restarts_used() > 0
                      ? absl::StrCat(" (after ", workers.restarts_used(), " restart(s))")
                      : "")
              << "\n";
    return 0;
  }
  if (g_signal != 0) return Interrupted();
  std::cerr << "tessel-launch: " << result.message << "\n"
            << "tessel-launch: stopped every process started; exiting with status "
            << result.exit_code << "\n";
  return result.exit_code;
}
