#include "runtime/spin_budget.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tessel {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/spin-budget-XXXXXX";
  return std::string(mkdtemp(tmpl)) + "/claims";
}

// Another process on the host claiming `threads` polling threads until
// killed; returns its pid once the claim is recorded.
pid_t OtherProcess(const std::string& dir, int threads) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    SpinBudget budget(dir);
    auto claim = budget.Take(threads);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  EXPECT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  return pid;
}

void Kill(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(SpinModeTest, ParsesTheThreeModesAndNamesThemInTheError) {
  EXPECT_EQ(*ParseSpinMode("auto"), SpinMode::kAuto);
  EXPECT_EQ(*ParseSpinMode("spin"), SpinMode::kSpin);
  EXPECT_EQ(*ParseSpinMode("event"), SpinMode::kEvent);
  auto bad = ParseSpinMode("busy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"busy\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("auto"), std::string::npos);
  EXPECT_STREQ(SpinModeName(SpinMode::kEvent), "event");
}

TEST(SpinBudgetTest, CountsEveryLiveProcessesClaimsAndForgetsTheDead) {
  const std::string dir = TempDir();
  SpinBudget mine(dir);
  EXPECT_EQ(mine.Read().threads, 0);
  auto claim = mine.Take(2);
  EXPECT_EQ(mine.Read().threads, 2);
  const pid_t other = OtherProcess(dir, 3);
  EXPECT_EQ(mine.Read().threads, 5);
  Kill(other);  // kill -9: no clean-up of its own
  EXPECT_EQ(mine.Read().threads, 2);
  EXPECT_NE(access((dir + "/" + std::to_string(other)).c_str(), F_OK), 0)
      << "a dead process's claim file is removed";
  claim.reset();
  EXPECT_EQ(mine.Read().threads, 0);
  EXPECT_NE(access((dir + "/" + std::to_string(getpid())).c_str(), F_OK), 0)
      << "a process that claims nothing has no file";
  auto again = mine.Take(1);
  EXPECT_EQ(mine.Read().threads, 1);
  EXPECT_GE(mine.Read().cores, 1);
}

TEST(SpinPolicyTest, AutoPollsOnlyWhileTheHostsPollingThreadsFitItsCores) {
  const std::string dir = TempDir();
  SpinBudget budget(dir);
  const absl::Duration spin = absl::Milliseconds(5);
  SpinPolicy policy(SpinMode::kAuto, spin, 1, "test", &budget);
  EXPECT_EQ(policy.Window(), spin) << policy.Describe();
  const int cores = budget.Read().cores;
  const pid_t crowd = OtherProcess(dir, cores);  // now cores + 1 polling threads
  // Another process's claim moves the host's generation: a window 50 ms on
  // counts it (no waiting for the once-a-second reading).
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(policy.Window(), SpinPolicy::kCrowdedPoll) << policy.Describe();
  EXPECT_NE(policy.Describe().find("then sleep"), std::string::npos) << policy.Describe();
  // A window shorter than the crowded poll stays as it is.
  SpinPolicy brief(SpinMode::kAuto, absl::Microseconds(30), 0, "brief", &budget);
  EXPECT_EQ(brief.Window(), absl::Microseconds(30));
  // A process killed without releasing moves nothing: the once-a-second
  // reading finds it gone.
  Kill(crowd);
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_EQ(policy.Window(), spin) << policy.Describe();
  // One that releases (its claim ends, or it exits cleanly) is seen at once.
  int claimed[2], release[2];
  ASSERT_EQ(pipe(claimed), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t polite = fork();
  if (polite == 0) {
    SpinBudget other(dir);
    {
      auto claim = other.Take(cores);
      char c = 1;
      if (write(claimed[1], &c, 1) != 1 || read(release[0], &c, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(claimed[0], &c, 1), 1);
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(policy.Window(), SpinPolicy::kCrowdedPoll) << policy.Describe();
  ASSERT_EQ(write(release[1], &c, 1), 1);
  ASSERT_EQ(waitpid(polite, nullptr, 0), polite);
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(policy.Window(), spin) << policy.Describe();
  for (int fd : {claimed[0], claimed[1], release[0], release[1]}) close(fd);
}

// Where the directory cannot be made (no /dev/shm), there is no generation
// to map: the process counts its own threads and polls by that, as before.
TEST(SpinPolicyTest, AutoWithoutASharedDirectoryCountsItsOwnThreads) {
  SpinBudget budget("/proc/tessel-spin-none/claims");
  SpinPolicy policy(SpinMode::kAuto, absl::Milliseconds(5), 1, "alone", &budget);
  EXPECT_EQ(policy.Window(), absl::Milliseconds(5));
  EXPECT_EQ(policy.Window(), absl::Milliseconds(5)) << "and again, without the mapping";
  EXPECT_EQ(budget.Read().threads, 1);
}

// A process that started alone sees processes started after it within 50 ms,
// whichever side claimed first (issue 46: one server polling as if
// alone for a second made whole benchmark runs 1.5-1.8x slower).
TEST(SpinPolicyTest, AutoSeesALaterProcessAtOnce) {
  const std::string dir = TempDir();
  SpinBudget budget(dir);
  SpinPolicy first(SpinMode::kAuto, absl::Milliseconds(5), 1, "first", &budget);
  EXPECT_EQ(first.Window(), absl::Milliseconds(5));
  const int cores = budget.Read().cores;
  const pid_t later = OtherProcess(dir, cores);
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(first.Window(), SpinPolicy::kCrowdedPoll) << first.Describe();
  Kill(later);
}

TEST(SpinPolicyTest, SpinAndEventIgnoreTheHostAndEventClaimsNothing) {
  const std::string dir = TempDir();
  SpinBudget budget(dir);
  const int cores = budget.Read().cores;
  const pid_t crowd = OtherProcess(dir, cores + 4);
  SpinPolicy spin(SpinMode::kSpin, absl::Milliseconds(2), 1, "spin", &budget);
  EXPECT_EQ(spin.Window(), absl::Milliseconds(2));
  SpinPolicy event(SpinMode::kEvent, absl::Milliseconds(2), 3, "event", &budget);
  EXPECT_EQ(event.Window(), absl::ZeroDuration());
  EXPECT_EQ(budget.Read().threads, cores + 4 + 1) << "event claims no polling thread";
  // A zero window is event-driven whatever the mode.
  SpinPolicy zero(SpinMode::kAuto, absl::ZeroDuration(), 1, "zero", &budget);
  EXPECT_EQ(zero.mode(), SpinMode::kEvent);
  Kill(crowd);
}

}  // namespace
}  // namespace tessel
