#include "testing/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace tessel {

std::string ProcessGroup::LogPath(const std::string& name) const {
  return absl::StrCat(log_dir_, "/", name, ".log");
}

absl::Status ProcessGroup::Start(const std::string& name, const std::vector<std::string>& argv,
                                 bool inherit_stdout,
                                 const std::vector<std::pair<std::string, std::string>>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot execute ", argv[0], ": ", std::strerror(errno),
                                            " (build it with bazel first)"));
  }
  const std::string log = LogPath(name);
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", log, ": ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child's environment, made before fork (after it, in a process with
  // threads, only async-signal-safe calls are allowed).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view key = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [k, v] : env) overridden = overridden || k == key;
    if (!overridden) env_strings.emplace_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fd, STDERR_FILENO);
    if (!inherit_stdout) dup2(fd, STDOUT_FILENO);
    execve(args[0], args.data(), envp.data());
    dprintf(fd, "execve %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fd);
  children_.push_back(Child{name, pid, false, 0});
  return absl::OkStatus();
}

std::optional<ProcessGroup::Exit> ProcessGroup::ExitOf(const std::string& name) const {
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (it->name != name) continue;
    if (!it->exited) return std::nullopt;
    Exit e;
    if (WIFSIGNALED(it->status)) {
      e.signal = WTERMSIG(it->status);
    } else {
      e.exit_code = WEXITSTATUS(it->status);
    }
    return e;
  }
  return std::nullopt;
}

std::string ProcessGroup::LogTail(const std::string& name, int lines) const {
  std::ifstream in(LogPath(name));
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

absl::Status ProcessGroup::Describe(const Child& c) const {
  std::string how;
  if (WIFSIGNALED(c.status)) {
    how = absl::StrCat("was killed by signal ", WTERMSIG(c.status), " (",
                       strsignal(WTERMSIG(c.status)), ")");
  } else {
    how = absl::StrCat("exited with status ", WEXITSTATUS(c.status));
  }
  return absl::AbortedError(absl::StrCat("process '", c.name, "' (pid ", c.pid, ") ", how,
                                         "; last lines of ", LogPath(c.name), ":\n",
                                         LogTail(c.name, 15)));
}

absl::Status ProcessGroup::Reap(bool) {
  for (Child& c : children_) {
    if (c.exited) continue;
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      c.exited = true;
      c.status = status;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) return Describe(c);
    }
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::CheckAlive() {
  TESSEL_RETURN_IF_ERROR(Reap(true));
  for (const Child& c : children_) {
    if (c.exited) return Describe(c);
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::WaitAll(const std::vector<std::string>& names, absl::Duration timeout,
                                   const volatile int* stop_requested) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    TESSEL_RETURN_IF_ERROR(Reap(true));
    bool all = true;
    for (const std::string& n : names) {
      bool found = false;
      for (const Child& c : children_) {
        if (c.name == n) {
          found = true;
          all = all && c.exited;
        }
      }
      if (!found) return absl::NotFoundError(absl::StrCat("no process named ", n));
    }
    if (all) return absl::OkStatus();
    if (stop_requested != nullptr && *stop_requested) {
      return absl::CancelledError("interrupted: stopping every process");
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("processes did not finish within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void ProcessGroup::StopAll() {
  for (Child& c : children_) {
    if (!c.exited) kill(c.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  for (Child& c : children_) {
    while (!c.exited) {
      int status = 0;
      pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || r < 0) {
        c.exited = true;
        c.status = status;
        break;
      }
      if (absl::Now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.exited = true;
        c.status = status;
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
}

std::string FindBinary(const std::string& path) {
  std::vector<std::string> roots;
  // The caller's runfiles first (a test's, made for this build), then this
  // binary's own: a binary run from a test resolves /proc/self/exe to the
  // output tree, whose runfiles Bazel refreshes only when it builds that
  // binary as a target of its own, so they may be an older build's.
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* v = std::getenv(env)) roots.push_back(absl::StrCat(v, "/tessel"));
  }
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) roots.push_back(absl::StrCat(std::string(self, n), ".runfiles/tessel"));
  if (n > 0) {
    std::string dir(self, n);
    dir = dir.substr(0, dir.rfind('/'));
    roots.push_back(dir.substr(0, dir.rfind('/')));  // bazel-bin/<pkg>/.. = bazel-bin
  }
  for (const std::string& r : roots) {
    std::string candidate = absl::StrCat(r, "/", path);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return path;
}

std::string MakeRunDir(const std::string& prefix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  if (tmp == nullptr) tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp ? tmp : "/tmp", "/", prefix, "-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return absl::StrCat(tmp ? tmp : "/tmp");
  return std::string(buf.data());
}

}  // namespace tessel
