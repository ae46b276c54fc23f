// ProgressLoop with fake hooks (no UCX): tasks run in order on the loop
// thread, progress is polled while busy and for `spin` after, the loop
// sleeps once armed and wakes for a Post or a watched fd, and Stop runs what
// was queued and refuses the rest.
#include "transport/ucx/internal/progress_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

// Counts what the loop asks of its hooks.
struct FakeSource {
  std::atomic<bool> ready{true};
  std::atomic<int> work{0};  // progress() consumes it
  std::atomic<int> progress_calls{0};
  std::atomic<int> arms{0};
  std::atomic<bool> busy_on_arm{false};

  ProgressLoop::Hooks Hooks() {
    return {[this] { return ready.load(); },
            [this] {
              ++progress_calls;
              bool any = false;
              while (work > 0) {
                --work;
                any = true;
              }
              return any;
            },
            [this] {
              ++arms;
              return !busy_on_arm.load();
            }};
  }
};

std::unique_ptr<ProgressLoop> MakeLoop(absl::Duration spin) {
  auto loop = ProgressLoop::Create(spin);
  EXPECT_TRUE(loop.ok()) << loop.status();
  return std::move(*loop);
}

// Waits up to 10 s for `cond`.
template <typename F>
bool Eventually(F cond) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!cond()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(ProgressLoopTest, TasksRunInOrderOnTheLoopThread) {
  FakeSource source;
  auto loop = MakeLoop(absl::ZeroDuration());
  loop->Start(source.Hooks());
  absl::Mutex mu;
  std::vector<int> order;
  std::thread::id loop_thread;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(loop->Post([&, i] {
      absl::MutexLock lock(&mu);
      order.push_back(i);
      loop_thread = std::this_thread::get_id();
    }));
  }
  ASSERT_TRUE(loop->Call([] {}));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(loop_thread, std::this_thread::get_id());
}

TEST(ProgressLoopTest, CallWaitsForItsTask) {
  FakeSource source;
  auto loop = MakeLoop(absl::ZeroDuration());
  loop->Start(source.Hooks());
  int value = 0;  // written by the loop thread, read here after Call
  ASSERT_TRUE(loop->Call([&] { value = 42; }));
  EXPECT_EQ(value, 42);
}

TEST(ProgressLoopTest, ProgressesWhileThereIsWork) {
  FakeSource source;
  auto loop = MakeLoop(absl::Seconds(100));  // never sleeps in this test
  loop->Start(source.Hooks());
  source.work = 5;
  EXPECT_TRUE(Eventually([&] { return source.work.load() == 0; }));
  EXPECT_TRUE(Eventually([&] { return source.progress_calls.load() > 10; })) << "spinning";
  EXPECT_EQ(source.arms.load(), 0) << "armed while spinning";
}

TEST(ProgressLoopTest, SleepsAfterTheSpinAndAPostWakesIt) {
  FakeSource source;
  auto loop = MakeLoop(absl::Milliseconds(1));
  loop->Start(source.Hooks());
  ASSERT_TRUE(Eventually([&] { return source.arms.load() > 0; })) << "never armed to sleep";
  // Asleep (or about to be): a task still runs, well before many 50 ms
  // timeouts pass.
  absl::Notification ran;
  const absl::Time posted = absl::Now();
  ASSERT_TRUE(loop->Post([&] { ran.Notify(); }));
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - posted, absl::Seconds(5));
}

TEST(ProgressLoopTest, AWatchedFdWakesTheLoopToProgress) {
  FakeSource source;
  auto loop = MakeLoop(absl::ZeroDuration());
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(loop->Watch(fd).ok());
  loop->Start(source.Hooks());
  ASSERT_TRUE(Eventually([&] { return source.arms.load() > 0; }));
  const int calls = source.progress_calls.load();
  source.work = 1;
  uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  EXPECT_TRUE(Eventually([&] { return source.work.load() == 0; }));
  EXPECT_GT(source.progress_calls.load(), calls);
  uint64_t v;
  ASSERT_EQ(read(fd, &v, sizeof(v)), static_cast<ssize_t>(sizeof(v)));
  loop->Unwatch(fd);
  loop->Stop();
  close(fd);
}

TEST(ProgressLoopTest, ABusyArmPollsAgainInsteadOfSleeping) {
  FakeSource source;
  source.busy_on_arm = true;
  auto loop = MakeLoop(absl::ZeroDuration());
  loop->Start(source.Hooks());
  EXPECT_TRUE(Eventually([&] { return source.arms.load() > 100; }))
      << "a busy arm must not sleep 50 ms";
}

TEST(ProgressLoopTest, NotReadyMeansTasksOnly) {
  FakeSource source;
  source.ready = false;
  auto loop = MakeLoop(absl::ZeroDuration());
  loop->Start(source.Hooks());
  ASSERT_TRUE(loop->Call([] {}));
  ASSERT_TRUE(loop->Call([] {}));
  EXPECT_EQ(source.progress_calls.load(), 0);
  EXPECT_EQ(source.arms.load(), 0);
}

TEST(ProgressLoopTest, StopRunsWhatWasQueuedAndRefusesTheRest) {
  FakeSource source;
  auto loop = MakeLoop(absl::Milliseconds(1));
  std::atomic<int> ran{0};
  // Queued before the thread starts: still run, before Stop returns.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(loop->Post([&] { ++ran; }));
  loop->Start(source.Hooks());
  loop->Stop();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_FALSE(loop->Post([&] { ++ran; }));
  EXPECT_FALSE(loop->Call([&] { ++ran; }));
  loop->Stop();  // idempotent
  EXPECT_EQ(ran.load(), 10);
}

TEST(ProgressLoopTest, ManyThreadsPost) {
  FakeSource source;
  auto loop = MakeLoop(absl::Milliseconds(1));
  loop->Start(source.Hooks());
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        loop->Post([&] { ++ran; });
        if (i % 50 == 0) absl::SleepFor(absl::Milliseconds(2));  // let it fall asleep
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(loop->Call([] {}));
  EXPECT_EQ(ran.load(), 2000);
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
