// tessel-launch's worker side: the environment each worker process gets, the
// command line split at "--", and the supervisor that starts N copies of a
// command, restarts the ones that fail within a job-wide budget (torchrun's
// --max_restarts) and says how the run ended as an exit status. The main
// (tools/launch_main.cc) adds flags, the embedded cluster and signals.
//
// The supervisor is single-threaded: Start() and Supervise() run on the
// caller's thread and own every worker process (a ProcessGroup; each worker
// dies with this process, PR_SET_PDEATHSIG).
//
// Example:
//   LaunchOptions o;
//   o.nproc_per_node = 2;
//   o.registry = cluster.registry_address();
//   o.num_servers = 2;
//   o.run_dir = cluster.run_dir();
//   o.command = {"/usr/bin/python3", "train.py"};
//   WorkerSupervisor workers(o, &cluster.processes(), &std::cerr);
//   LaunchResult r = workers.Run(&g_signal);  // r.exit_code: 0, a worker's, 128+signal
#ifndef TESSEL_TOOLS_INTERNAL_LAUNCH_H_
#define TESSEL_TOOLS_INTERNAL_LAUNCH_H_

#include <csignal>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/metrics.h"
#include "testing/process.h"

namespace tessel {

// argv split at the first "--": the launcher's own arguments (argv[0]
// included, ready for flag parsing) and the worker command after it.
struct SplitArgs {
  std::vector<char*> launcher;  // argv[0] and the flags before "--"
  std::vector<std::string> command;
  bool has_separator = false;
};
SplitArgs SplitAtSeparator(int argc, char** argv);

// The executable a command name runs: a name with a '/' as it is (relative
// to the working directory, made absolute), else the first match on the
// colon-separated `path_env` (as execvp does). NotFound saying so otherwise.
absl::StatusOr<std::string> ResolveCommand(const std::string& command, const std::string& path_env);

// The folder holding the Python package `tessel/` (python/tessel/__init__.py
// in this binary's runfiles), for PYTHONPATH; "" when this build has none.
std::string FindPythonPackageRoot();

// Fails unless a TCP connection to HOST:PORT opens within `timeout` (tried
// again every 100 ms): the check that --registry names a running registry.
absl::Status CheckReachable(const std::string& host_port, absl::Duration timeout);

struct LaunchOptions {
  int nproc_per_node = 1;
  // Many hosts (torchrun's --nnodes/--node_rank): this host's workers are
  // ranks node_rank * nproc_per_node + [0, nproc_per_node) of a world of
  // nnodes * nproc_per_node.
  int nnodes = 1;
  int node_rank = 0;
  int GlobalRank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
  std::string registry;  // host:port the workers use
  int num_servers = 0;   // TESSEL_NUM_SERVERS (0: every server of the pool)
  std::string job = "default-job";
  int max_restarts = 0;              // job-wide budget, as torchrun's --max_restarts
  std::string config;                // TESSEL_CONFIG when not empty (an absolute path)
  std::string run_dir;               // worker logs; TESSEL_RUN_DIR
  std::string python_root;           // prepended to PYTHONPATH when not empty
  std::string inherited_pythonpath;  // this process's $PYTHONPATH
  std::vector<std::string> command;  // argv; command[0] an absolute path
  absl::Duration timeout = absl::InfiniteDuration();
  std::string ucx_tls;  // TESSEL_UCX_TLS when not empty: the embedded servers' transports
  // TESSEL_TOKEN_FILE when not empty: the worker token of the embedded
  // cluster (testing/launch_credentials.h); the file's path, never the token.
  std::string token_file;
};

// NAME=VALUE pairs the worker of `local_rank` on this host gets on top of
// the launcher's own environment (docs/launch.md lists them).
std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const LaunchOptions& options,
                                                                   int local_rank,
                                                                   int restart_count);

// A worker process that ended badly: its name and how.
struct ProcessExit {
  std::string name;
  ProcessGroup::Exit how;
  int ShellStatus() const { return how.ShellStatus(); }
};
// The first of `names` that has exited non-zero or by a signal, if any.
std::optional<ProcessExit> FirstFailure(const ProcessGroup& group,
                                        const std::vector<std::string>& names);

struct LaunchResult {
  int exit_code = 0;    // 0; a failed worker's ShellStatus; 128+signal; 124 (timeout); 1
  std::string message;  // what happened, for the user ("" on success)
};

// tessel-launch's metrics (its --metrics_address also serves the embedded
// registry's): worker starts, failures and restarts.
struct LaunchFamilies {
  metrics::Family& starts;
  metrics::Family& failures;
  metrics::Family& restarts;
};
LaunchFamilies& LaunchMetrics();

class WorkerSupervisor {
 public:
  // `servers` (may be null): processes that must stay up while workers run
  // (the embedded cluster's); one exiting ends the run with status 1.
  // Progress lines (where the logs are, restarts) go to `report`.
  WorkerSupervisor(LaunchOptions options, ProcessGroup* servers, std::ostream* report);
  ~WorkerSupervisor() { StopAll(); }

  // Starts every rank, then waits until all exit 0 (exit_code 0), a worker
  // fails with no restart left, a server exits, `*stop_signal` turns
  // non-zero (128 + that signal) or the timeout passes (124). Workers are
  // stopped (SIGTERM, then SIGKILL after 3 s) before it returns on failure.
  LaunchResult Run(const volatile std::sig_atomic_t* stop_signal);

  // Stops every worker still running.
  void StopAll() { workers_.StopAll(); }

  int restarts_used() const { return restarts_used_; }
  // The log file of this host's `local_rank`'s latest process.
  std::string LogPath(int local_rank) const { return workers_.LogPath(current_[local_rank]); }

 private:
  absl::Status StartRank(int local_rank, int restart_count);
  // The local rank of a process, -1 if none.
  int RankOf(const std::string& process_name) const;
  int GlobalRank(int local_rank) const { return options_.GlobalRank(local_rank); }

  LaunchOptions options_;
  ProcessGroup* servers_;
  std::ostream* report_;
  ProcessGroup workers_;
  std::vector<std::string> current_;  // per rank: its latest process's name
  int restarts_used_ = 0;
};

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_LAUNCH_H_
