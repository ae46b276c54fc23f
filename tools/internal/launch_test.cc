#include "tools/internal/launch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/process.h"

namespace tessel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::map<std::string, std::string> EnvMap(const LaunchOptions& o, int rank, int restarts) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : WorkerEnvironment(o, rank, restarts)) m[k] = v;
  return m;
}

TEST(SplitAtSeparator, SplitsAtTheFirstDoubleDash) {
  const char* args[] = {"tessel-launch", "--nproc_per_node=2", "--", "sh", "-c", "x", "--", "y"};
  SplitArgs s = SplitAtSeparator(8, const_cast<char**>(args));
  EXPECT_TRUE(s.has_separator);
  ASSERT_EQ(s.launcher.size(), 2u);
  EXPECT_STREQ(s.launcher[1], "--nproc_per_node=2");
  EXPECT_THAT(s.command, ElementsAre("sh", "-c", "x", "--", "y"));
}

TEST(SplitAtSeparator, NoSeparatorOrNoCommand) {
  const char* args[] = {"tessel-launch", "--servers=2", "sh"};
  SplitArgs s = SplitAtSeparator(3, const_cast<char**>(args));
  EXPECT_FALSE(s.has_separator);
  EXPECT_EQ(s.launcher.size(), 3u);
  EXPECT_TRUE(s.command.empty());
  const char* trailing[] = {"tessel-launch", "--"};
  s = SplitAtSeparator(2, const_cast<char**>(trailing));
  EXPECT_TRUE(s.has_separator);
  EXPECT_TRUE(s.command.empty());
}

TEST(ResolveCommand, LooksUpNamesOnPath) {
  auto sh = ResolveCommand("sh", "/nonexistent:/usr/bin:/bin");
  ASSERT_TRUE(sh.ok()) << sh.status();
  EXPECT_TRUE(*sh == "/usr/bin/sh" || *sh == "/bin/sh") << *sh;
  auto missing = ResolveCommand("no-such-command-xyz", "/usr/bin:/bin");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("not found on PATH"));
}

TEST(ResolveCommand, PathsAreTakenAsTheyAre) {
  EXPECT_EQ(*ResolveCommand("/bin/sh", ""), "/bin/sh");
  EXPECT_TRUE(absl::IsNotFound(ResolveCommand("/no/such/file", "/bin").status()));
  EXPECT_TRUE(absl::IsNotFound(ResolveCommand("/tmp", "/bin").status()));  // a folder
  const std::string script = MakeRunDir("resolve") + "/x=y";
  std::ofstream(script) << "#!/bin/sh\n";
  chmod(script.c_str(), 0755);
  EXPECT_TRUE(absl::IsInvalidArgument(ResolveCommand(script, "").status()));
}

TEST(WorkerEnvironment, TesselAndTorchrunNames) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.registry = "127.0.0.1:7070";
  o.num_servers = 2;
  o.job = "j";
  o.run_dir = "/tmp/run";
  auto env = EnvMap(o, 3, 1);
  EXPECT_EQ(env["TESSEL_REGISTRY"], "127.0.0.1:7070");
  EXPECT_EQ(env["TESSEL_JOB"], "j");
  EXPECT_EQ(env["TESSEL_RANK"], "3");
  EXPECT_EQ(env["TESSEL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["TESSEL_NUM_SERVERS"], "2");
  EXPECT_EQ(env["TESSEL_RESTART_COUNT"], "1");
  EXPECT_EQ(env["TESSEL_RUN_DIR"], "/tmp/run");
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "3");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env.count("TESSEL_CONFIG"), 0u);
  EXPECT_EQ(env.count("PYTHONPATH"), 0u);

  o.config = "/etc/tessel.json";
  o.python_root = "/r/tessel/python";
  EXPECT_EQ(EnvMap(o, 0, 0)["TESSEL_CONFIG"], "/etc/tessel.json");
  EXPECT_EQ(EnvMap(o, 0, 0)["PYTHONPATH"], "/r/tessel/python");
  o.inherited_pythonpath = "/a:/b";
  EXPECT_EQ(EnvMap(o, 0, 0)["PYTHONPATH"], "/r/tessel/python:/a:/b");
}

// Many hosts: this host's local rank 1 of 4 on node 2 of 3 is rank 9 of 12.
TEST(WorkerEnvironment, NodeRanksOffsetTheRanks) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  o.nnodes = 3;
  o.node_rank = 2;
  auto env = EnvMap(o, 1, 0);
  EXPECT_EQ(env["TESSEL_RANK"], "9");
  EXPECT_EQ(env["RANK"], "9");
  EXPECT_EQ(env["TESSEL_WORLD_SIZE"], "12");
  EXPECT_EQ(env["WORLD_SIZE"], "12");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "2");
}

// FirstFailure names the first listed process that exited non-zero or by a
// signal, with how (ProcessGroup::ExitOf), and none while all are well.
TEST(FirstFailure, ExitCodesAndSignals) {
  const std::string dir = MakeRunDir("first-failure");
  ProcessGroup group(dir);
  ASSERT_TRUE(group.Start("fine", {"/bin/sh", "-c", "exit 0"}).ok());
  ASSERT_TRUE(group.WaitAll({"fine"}, absl::Seconds(30)).ok());
  EXPECT_FALSE(FirstFailure(group, {"fine"}).has_value());
  ASSERT_TRUE(group.Start("exits3", {"/bin/sh", "-c", "exit 3"}).ok());
  EXPECT_FALSE(group.WaitAll({"exits3"}, absl::Seconds(30)).ok());
  auto e = FirstFailure(group, {"fine", "exits3"});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->name, "exits3");
  EXPECT_EQ(e->how.exit_code, 3);
  EXPECT_EQ(e->how.signal, 0);
  EXPECT_EQ(e->ShellStatus(), 3);

  ProcessGroup killed_group(dir);
  ASSERT_TRUE(killed_group.Start("killed", {"/bin/sh", "-c", "kill -9 $$"}).ok());
  EXPECT_FALSE(killed_group.WaitAll({"killed"}, absl::Seconds(30)).ok());
  e = FirstFailure(killed_group, {"killed"});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->how.signal, 9);
  EXPECT_EQ(e->ShellStatus(), 137);
}

// ProcessGroup::Start's env: on top of the parent's environment, overriding it.
TEST(ProcessGroupEnv, SetsAndOverrides) {
  const std::string dir = MakeRunDir("env");
  ProcessGroup group(dir);
  setenv("TESSEL_ENV_TEST_KEPT", "kept", 1);
  setenv("TESSEL_ENV_TEST_OVERRIDDEN", "old", 1);
  const std::string out = dir + "/env.txt";
  ASSERT_TRUE(group
                  .Start("env",
                         {"/bin/sh", "-c",
                          "echo \"$TESSEL_ENV_TEST_KEPT $TESSEL_ENV_TEST_OVERRIDDEN "
                          "$TESSEL_ENV_TEST_NEW\" > " +
                              out},
                         false,
                         {{"TESSEL_ENV_TEST_OVERRIDDEN", "new"}, {"TESSEL_ENV_TEST_NEW", "x y"}})
                  .ok());
  ASSERT_TRUE(group.WaitAll({"env"}, absl::Seconds(30)).ok());
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "kept new x y");
}

class SupervisorTest : public ::testing::Test {
 protected:
  LaunchOptions Options(int n, const std::string& script) {
    LaunchOptions o;
    o.nproc_per_node = n;
    o.registry = "127.0.0.1:1";
    o.run_dir = MakeRunDir("supervisor");
    o.command = {"/bin/sh", "-c", script};
    return o;
  }
  std::ostringstream report_;
  volatile std::sig_atomic_t signal_ = 0;
};

TEST_F(SupervisorTest, AllExitZero) {
  LaunchOptions o = Options(3, "echo \"$TESSEL_RANK/$WORLD_SIZE\" > \"$TESSEL_RUN_DIR/r$RANK\"");
  WorkerSupervisor w(o, nullptr, &report_);
  LaunchResult r = w.Run(&signal_);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(absl::StrCat(o.run_dir, "/r", rank));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, absl::StrCat(rank, "/3"));
  }
}

TEST_F(SupervisorTest, RestartsAFailedRankWithinTheBudget) {
  LaunchOptions o = Options(
      2,
      "echo attempt $TESSEL_RESTART_COUNT >&2; [ $RANK = 1 ] && [ $TESSEL_RESTART_COUNT = 0 ] "
      "&& exit 3; exit 0");
  o.max_restarts = 1;
  WorkerSupervisor w(o, nullptr, &report_);
  LaunchResult r = w.Run(&signal_);
  EXPECT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(w.restarts_used(), 1);
  EXPECT_THAT(report_.str(), HasSubstr("rank 1 (worker1) exited with status 3; restarting it"));
  EXPECT_THAT(report_.str(), HasSubstr("attempt 0"));
  EXPECT_EQ(w.LogPath(1), o.run_dir + "/worker1.restart1.log");
}

TEST_F(SupervisorTest, FailsWithTheWorkersStatusWhenNoRestartIsLeft) {
  LaunchOptions o = Options(2, "[ $RANK = 1 ] && { echo dying >&2; exit 3; }; sleep 60");
  WorkerSupervisor w(o, nullptr, &report_);
  const absl::Time start = absl::Now();
  LaunchResult r = w.Run(&signal_);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.message, HasSubstr("rank 1 (worker1) exited with status 3"));
  EXPECT_THAT(r.message, HasSubstr("dying"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // rank 0 was stopped, not waited for
}

TEST_F(SupervisorTest, SignalDeathIs128PlusSignal) {
  LaunchOptions o = Options(1, "kill -9 $$");
  o.max_restarts = 2;
  WorkerSupervisor w(o, nullptr, &report_);
  LaunchResult r = w.Run(&signal_);
  EXPECT_EQ(r.exit_code, 137) << r.message;
  EXPECT_EQ(w.restarts_used(), 2);
  EXPECT_THAT(r.message, HasSubstr("killed by signal 9"));
}

TEST_F(SupervisorTest, StopSignalAndTimeout) {
  LaunchOptions o = Options(2, "sleep 60");
  signal_ = SIGINT;
  WorkerSupervisor w(o, nullptr, &report_);
  EXPECT_EQ(w.Run(&signal_).exit_code, 130);

  signal_ = 0;
  o.timeout = absl::Milliseconds(300);
  WorkerSupervisor t(o, nullptr, &report_);
  const absl::Time start = absl::Now();
  EXPECT_EQ(t.Run(&signal_).exit_code, 124);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(CheckReachable, ListeningAndClosedPorts) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  EXPECT_TRUE(CheckReachable(absl::StrCat("127.0.0.1:", port), absl::Seconds(2)).ok());
  close(fd);
  absl::Status closed = CheckReachable(absl::StrCat("127.0.0.1:", port), absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsUnavailable(closed)) << closed;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckReachable("nocolon", absl::Seconds(1))));
}

}  // namespace
}  // namespace tessel
