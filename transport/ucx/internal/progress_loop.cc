#include "transport/ucx/internal/progress_loop.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace tessel {
namespace ucx_internal {

absl::StatusOr<std::unique_ptr<ProgressLoop>> ProgressLoop::Create(absl::Duration spin) {
  return Create([spin] { return spin; });
}

absl::StatusOr<std::unique_ptr<ProgressLoop>> ProgressLoop::Create(
    std::function<absl::Duration()> spin) {
  std::unique_ptr<ProgressLoop> loop(new ProgressLoop(std::move(spin)));
  loop->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  loop->event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->epoll_fd_ < 0 || loop->event_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  TESSEL_RETURN_IF_ERROR(loop->Watch(loop->event_fd_));
  return loop;
}

ProgressLoop::~ProgressLoop() {
  Stop();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

absl::Status ProgressLoop::Watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl(ADD, ", fd, "): ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void ProgressLoop::Unwatch(int fd) { epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr); }

void ProgressLoop::Start(Hooks hooks) {
  hooks_ = std::move(hooks);
  thread_ = std::thread([this] { Run(); });
}

void ProgressLoop::Wake() {
  uint64_t one = 1;
  ssize_t unused = write(event_fd_, &one, sizeof(one));
  (void)unused;
}

bool ProgressLoop::Post(std::function<void()> task) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    tasks_.push_back(std::move(task));
    wake = sleeping_;
  }
  if (wake) Wake();
  return true;
}

bool ProgressLoop::Call(std::function<void()> task) {
  absl::Notification done;
  if (!Post([&task, &done] {
        task();
        done.Notify();
      })) {
    return false;
  }
  done.WaitForNotification();
  return true;
}

void ProgressLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  Wake();
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool ProgressLoop::RunTasks() {
  std::deque<std::function<void()>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
  return !tasks.empty();
}

void ProgressLoop::Run() {
  absl::Time last_active = absl::Now();
  for (;;) {
    bool did = RunTasks();
    {
      absl::MutexLock lock(&mu_);
      if (stop_ && tasks_.empty()) break;
    }
    if (!hooks_.ready()) {
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    if (hooks_.progress()) did = true;
    if (did) {
      last_active = absl::Now();
      continue;
    }
    if (absl::Now() - last_active < spin_()) {
      sched_yield();
      continue;
    }
    if (!hooks_.arm()) continue;
    {
      absl::MutexLock lock(&mu_);
      if (!tasks_.empty() || stop_) continue;
      sleeping_ = true;
    }
    epoll_event evs[4];
    const int n = epoll_wait(epoll_fd_, evs, 4, 50);
    {
      absl::MutexLock lock(&mu_);
      sleeping_ = false;
    }
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == event_fd_) {
        uint64_t v;
        ssize_t unused = read(event_fd_, &v, sizeof(v));
        (void)unused;
      }
    }
    last_active = absl::Now();
  }
}

}  // namespace ucx_internal
}  // namespace tessel
