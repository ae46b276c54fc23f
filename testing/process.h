// Child processes for launchers and multi-process tests: start real binaries,
// watch them, and stop every one of them on the way out.
//
// Each child gets its own log file (stdout and stderr, or stderr only when
// `inherit_stdout`), dies with its parent (PR_SET_PDEATHSIG), and is stopped
// with SIGTERM then SIGKILL by StopAll() and by the destructor.
//
// Example:
//   ProcessGroup group(run_dir);
//   group.Start("server0", {server_bin, "--shard=0", ...});
//   absl::Status s = group.WaitAll({"worker0", "worker1"}, absl::Minutes(5));
//   // s names the first process that failed, how, and the tail of its log.
#ifndef TESSEL_TESTING_PROCESS_H_
#define TESSEL_TESTING_PROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tessel {

class ProcessGroup {
 public:
  explicit ProcessGroup(std::string log_dir) : log_dir_(std::move(log_dir)) {}
  ~ProcessGroup() { StopAll(); }

  // `env`: NAME=VALUE pairs set on top of this process's environment.
  absl::Status Start(const std::string& name, const std::vector<std::string>& argv,
                     bool inherit_stdout = false,
                     const std::vector<std::pair<std::string, std::string>>& env = {});
  // Waits until every process in `names` exited with status 0. Fails as soon
  // as any process of the group (named or not) exits abnormally or non-zero,
  // or `stop_requested` turns true, or the timeout passes.
  absl::Status WaitAll(const std::vector<std::string>& names, absl::Duration timeout,
                       const volatile int* stop_requested = nullptr);
  // Non-blocking check: the first child that has died, or OK.
  absl::Status CheckAlive();
  void StopAll();
  std::string LogPath(const std::string& name) const;
  // How the (latest) process called `name` ended, once it has been reaped by
  // WaitAll/CheckAlive/StopAll; nullopt while it runs or if there is none.
  struct Exit {
    int exit_code = 0;  // when signal == 0
    int signal = 0;
    // What a shell reports: the exit code, or 128 + signal.
    int ShellStatus() const { return signal != 0 ? 128 + signal : exit_code; }
    bool ok() const { return signal == 0 && exit_code == 0; }
  };
  std::optional<Exit> ExitOf(const std::string& name) const;
  std::string LogTail(const std::string& name, int lines) const;

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    bool exited = false;
    int status = 0;
  };
  absl::Status Reap(bool block_none);
  absl::Status Describe(const Child& c) const;

  std::string log_dir_;
  std::vector<Child> children_;
};

// Absolute path of a Bazel-built binary shipped with the caller (its data
// dependency), e.g. FindBinary("server/tessel-server"): looked up in
// $RUNFILES_DIR and $TEST_SRCDIR first (a test's runfiles, this build's),
// then in this binary's own runfiles and beside it.
std::string FindBinary(const std::string& workspace_relative_path);

// Creates a fresh directory for a run's logs and files under $TMPDIR.
std::string MakeRunDir(const std::string& prefix);

}  // namespace tessel

#endif  // TESSEL_TESTING_PROCESS_H_
