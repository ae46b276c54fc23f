#include "tools/internal/launch.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace tessel {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string WorkingDirectory() {
  char buffer[4096];
  return getcwd(buffer, sizeof(buffer)) != nullptr ? std::string(buffer) : std::string(".");
}

// One non-blocking connect to `address`, waiting at most `timeout`.
bool ConnectOnce(const addrinfo* address, absl::Duration timeout) {
  const int fd = socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        address->ai_protocol);
  if (fd < 0) return false;
  bool ok = connect(fd, address->ai_addr, address->ai_addrlen) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p = {fd, POLLOUT, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
    if (poll(&p, 1, ms > 0 ? ms : 1) == 1) {
      int error = 0;
      socklen_t len = sizeof(error);
      ok = getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
    }
  }
  close(fd);
  return ok;
}

std::string DescribeExit(const ProcessExit& e) {
  if (e.how.signal != 0) {
    return absl::StrCat("was killed by signal ", e.how.signal, " (", strsignal(e.how.signal), ")");
  }
  return absl::StrCat("exited with status ", e.how.exit_code);
}

}  // namespace

SplitArgs SplitAtSeparator(int argc, char** argv) {
  SplitArgs split;
  int i = 0;
  for (; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--") == 0) {
      split.has_separator = true;
      break;
    }
    split.launcher.push_back(argv[i]);
  }
  for (++i; i < argc; ++i) split.command.push_back(argv[i]);
  return split;
}

absl::StatusOr<std::string> ResolveCommand(const std::string& command,
                                           const std::string& path_env) {
  if (command.empty()) return absl::InvalidArgumentError("the command is empty");
  std::string found;
  if (command.find('/') != std::string::npos) {
    found = command[0] == '/' ? command : absl::StrCat(WorkingDirectory(), "/", command);
    if (!IsExecutableFile(found)) {
      return absl::NotFoundError(
          absl::StrCat("command '", command, "': no executable file ", found));
    }
  } else {
    for (absl::string_view dir : absl::StrSplit(path_env, ':')) {
      // An empty PATH entry means the working directory, as for execvp.
      std::string candidate =
          absl::StrCat(dir.empty() ? WorkingDirectory() : std::string(dir), "/", command);
      if (!candidate.empty() && candidate[0] != '/') {
        candidate = absl::StrCat(WorkingDirectory(), "/", candidate);
      }
      if (IsExecutableFile(candidate)) {
        found = candidate;
        break;
      }
    }
    if (found.empty()) {
      return absl::NotFoundError(
          absl::StrCat("command '", command, "' not found on PATH (", path_env, ")"));
    }
  }
  // The command runs as `env NAME=VALUE... COMMAND`, where a '=' would make
  // it one more assignment.
  if (found.find('=') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("command path ", found, " contains '=': rename or link it"));
  }
  return found;
}

std::string FindPythonPackageRoot() {
  // FindBinary looks in $RUNFILES_DIR, $TEST_SRCDIR and this binary's
  // runfiles for a path it may execute, which a folder is; the package must
  // also hold its __init__.py.
  const std::string package = FindBinary("python/tessel");
  if (package.empty() || package[0] != '/') return "";
  if (access(absl::StrCat(package, "/__init__.py").c_str(), R_OK) != 0) return "";
  return package.substr(0, package.rfind('/'));
}

absl::Status CheckReachable(const std::string& host_port, absl::Duration timeout) {
  std::string host, port;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("registry address '", host_port, "' is not HOST:PORT"));
  }
  host = host_port.substr(0, colon);
  port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_error = "no answer";
  for (;;) {
    addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* addresses = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &addresses);
    if (rc == 0) {
      bool ok = false;
      for (const addrinfo* a = addresses; a != nullptr && !ok; a = a->ai_next) {
        ok = ConnectOnce(a, std::max(absl::Milliseconds(100), deadline - absl::Now()));
      }
      freeaddrinfo(addresses);
      if (ok) return absl::OkStatus();
      last_error = "connection refused or timed out";
    } else {
      last_error = gai_strerror(rc);
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::UnavailableError(absl::StrCat("cannot reach the registry at ", host_port, " (",
                                             last_error, ") within ", absl::FormatDuration(timeout),
                                             "; is tessel-registry running there?"));
}

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const LaunchOptions& o,
                                                                   int local_rank,
                                                                   int restart_count) {
  const int rank = o.GlobalRank(local_rank);
  const int world = o.nnodes * o.nproc_per_node;
  std::vector<std::pair<std::string, std::string>> env = {
      {"TESSEL_REGISTRY", o.registry},
      {"TESSEL_JOB", o.job},
      {"TESSEL_RANK", absl::StrCat(rank)},
      {"TESSEL_WORLD_SIZE", absl::StrCat(world)},
      {"TESSEL_NUM_SERVERS", absl::StrCat(o.num_servers)},
      {"TESSEL_RESTART_COUNT", absl::StrCat(restart_count)},
      {"TESSEL_RUN_DIR", o.run_dir},
      // torchrun's names.
      {"RANK", absl::StrCat(rank)},
      {"WORLD_SIZE", absl::StrCat(world)},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(o.nproc_per_node)},
      {"GROUP_RANK", absl::StrCat(o.node_rank)},
  };
  if (!o.config.empty()) env.push_back({"TESSEL_CONFIG", o.config});
  if (!o.ucx_tls.empty()) env.push_back({"TESSEL_UCX_TLS", o.ucx_tls});
  if (!o.token_file.empty()) env.push_back({"TESSEL_TOKEN_FILE", o.token_file});
  if (!o.python_root.empty()) {
    env.push_back({"PYTHONPATH", o.inherited_pythonpath.empty()
                                     ? o.python_root
                                     : absl::StrCat(o.python_root, ":", o.inherited_pythonpath)});
  }
  return env;
}

std::optional<ProcessExit> FirstFailure(const ProcessGroup& group,
                                        const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const std::optional<ProcessGroup::Exit> how = group.ExitOf(name);
    if (how.has_value() && !how->ok()) return ProcessExit{name, *how};
  }
  return std::nullopt;
}

WorkerSupervisor::WorkerSupervisor(LaunchOptions options, ProcessGroup* servers,
                                   std::ostream* report)
    : options_(std::move(options)),
      servers_(servers),
      report_(report),
      workers_(options_.run_dir),
      current_(options_.nproc_per_node) {}

LaunchFamilies& LaunchMetrics() {
  static LaunchFamilies* f = [] {
    metrics::Registry& r = metrics::Default();
    auto* families = new LaunchFamilies{
        r.AddCounter("tessel_launch_worker_starts_total",
                     "worker processes started (first starts and restarts)", {}),
        r.AddCounter("tessel_launch_worker_failures_total",
                     "worker processes that exited non-zero or by a signal", {}),
        r.AddCounter("tessel_launch_restarts_total", "restarts used of the --max_restarts budget",
                     {}),
    };
    families->starts.GetCounter({});
    families->failures.GetCounter({});
    families->restarts.GetCounter({});
    return families;
  }();
  return *f;
}

absl::Status WorkerSupervisor::StartRank(int local_rank, int restart_count) {
  const std::vector<std::string>& argv = options_.command;
  const int rank = GlobalRank(local_rank);
  const std::string name = restart_count == 0
                               ? absl::StrCat("worker", rank)
                               : absl::StrCat("worker", rank, ".restart", restart_count);
  absl::Status s = workers_.Start(name, argv, /*inherit_stdout=*/local_rank == 0,
                                  WorkerEnvironment(options_, local_rank, restart_count));
  if (s.ok()) {
    current_[local_rank] = name;
    LaunchMetrics().starts.GetCounter({})->Add();
  }
  return s;
}

int WorkerSupervisor::RankOf(const std::string& process_name) const {
  for (size_t r = 0; r < current_.size(); ++r) {
    if (current_[r] == process_name) return static_cast<int>(r);
  }
  return -1;
}

LaunchResult WorkerSupervisor::Run(const volatile std::sig_atomic_t* stop_signal) {
  const absl::Time deadline = options_.timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options_.timeout;
  auto fail = [this](int code, std::string message) {
    StopAll();
    return LaunchResult{code, std::move(message)};
  };
  auto interrupted = [&] {
    const int sig = *stop_signal;
    return fail(128 + sig, absl::StrCat("interrupted by signal ", sig, " (", strsignal(sig),
                                        "): stopped every worker"));
  };
  for (int r = 0; r < options_.nproc_per_node; ++r) {
    absl::Status s = StartRank(r, 0);
    if (!s.ok()) {
      return fail(1, absl::StrCat("cannot start rank ", GlobalRank(r), ": ", s.message()));
    }
  }
  for (;;) {
    if (*stop_signal != 0) return interrupted();
    if (servers_ != nullptr) {
      absl::Status alive = servers_->CheckAlive();
      if (!alive.ok()) {
        if (*stop_signal != 0) return interrupted();
        return fail(1, absl::StrCat("a shard server stopped while workers ran: ", alive.message()));
      }
    }
    absl::Status s = workers_.WaitAll(current_, absl::Milliseconds(100));
    if (s.ok()) return LaunchResult{0, ""};
    if (*stop_signal != 0) return interrupted();
    if (absl::IsDeadlineExceeded(s)) {
      if (absl::Now() >= deadline) {
        return fail(124, absl::StrCat("timed out after ", absl::FormatDuration(options_.timeout),
                                      " (--timeout_s): stopped every worker"));
      }
      continue;
    }
    const std::optional<ProcessExit> exit = FirstFailure(workers_, current_);
    const int local = exit.has_value() ? RankOf(exit->name) : -1;
    if (local < 0) return fail(1, std::string(s.message()));
    const int rank = GlobalRank(local);
    const std::string log = workers_.LogPath(exit->name);
    const std::string tail = workers_.LogTail(exit->name, 15);
    LaunchMetrics().failures.GetCounter({})->Add();
    if (restarts_used_ < options_.max_restarts) {
      ++restarts_used_;
      LaunchMetrics().restarts.GetCounter({})->Add();
      *report_ << "tessel-launch: rank " << rank << " (" << exit->name << ") "
               << DescribeExit(*exit) << "; restarting it (restart " << restarts_used_ << " of "
               << options_.max_restarts << ", TESSEL_RESTART_COUNT=" << restarts_used_
               << "); last lines of " << log << ":\n"
               << tail << (tail.empty() ? "" : "\n") << std::flush;
      absl::Status started = StartRank(local, restarts_used_);
      if (!started.ok()) {
        return fail(1, absl::StrCat("cannot restart rank ", rank, ": ", started.message()));
      }
      continue;
    }
    return fail(exit->ShellStatus(),
                absl::StrCat("rank ", rank, " (", exit->name, ") ", DescribeExit(*exit),
                             options_.max_restarts == 0
                                 ? " (no restarts: --max_restarts=0)"
                                 : absl::StrCat(" and the ", options_.max_restarts,
                                                " restart(s) of --max_restarts are used up"),
                             "; stopped every worker; last lines of ", log, ":\n", tail));
  }
}

}  // namespace tessel
