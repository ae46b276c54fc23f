// ProgressLoop: the one thread that drives a polled library (the UCX
// transport's worker), with a work queue for the other threads, an eventfd
// to wake it, and spin-then-sleep pacing. It knows nothing of UCX: what
// "progress" means comes in as Hooks.
//
// Pacing: the thread runs queued tasks, then progresses; while anything
// happened, and for `spin` after the last time something did, it polls
// again (yielding the CPU between polls). Then it arms the wake-up sources
// and sleeps in epoll on its own eventfd (Post wakes it) and on the fds
// given to Watch (UCX's event fd), at most 50 ms: the timeout bounds the
// cost of a missed wake-up, never correctness. An idle process uses no CPU.
//
// Threads: Post, Call, Watch, Unwatch and Stop may be called from any
// thread; Call and Stop never from the loop thread (they wait for it). The
// hooks and the tasks run on the loop thread, one at a time, in Post order.
// Once Stop returned, the thread is gone and the caller owns what the loop
// thread owned.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(auto loop, ProgressLoop::Create(absl::Milliseconds(5)));
//   TESSEL_RETURN_IF_ERROR(loop->Watch(ucx_event_fd));
//   loop->Start({.ready = [&] { return worker != nullptr; },
//                .progress = [&] { bool any = false; while (ucp_worker_progress(worker)) any =
//                true; return any; }, .arm = [&] { return ucp_worker_arm(worker) != UCS_ERR_BUSY;
//                }});
//   loop->Post([&] { /* on the loop thread */ });
//   loop->Stop();
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_PROGRESS_LOOP_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_PROGRESS_LOOP_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessel {
namespace ucx_internal {

class ProgressLoop {
 public:
  struct Hooks {
    // Whether there is anything to progress now; false: the loop only runs
    // tasks, every 10 ms (the UCX transport after a failed Reset).
    std::function<bool()> ready;
    // Progresses until idle; true if anything happened.
    std::function<bool()> progress;
    // Arms the watched fds before the loop sleeps; false: events are
    // already pending (the loop polls again instead of sleeping).
    std::function<bool()> arm;
  };

  // A loop that polls for `spin` after the last activity before it sleeps.
  // The thread starts with Start().
  static absl::StatusOr<std::unique_ptr<ProgressLoop>> Create(absl::Duration spin);
  // The same, the polling window asked for each time the loop runs out of
  // work (a SpinPolicy's Window(): 0 sleeps at once).
  static absl::StatusOr<std::unique_ptr<ProgressLoop>> Create(std::function<absl::Duration()> spin);
  ~ProgressLoop();  // Stop(), then closes its fds
  ProgressLoop(const ProgressLoop&) = delete;
  ProgressLoop& operator=(const ProgressLoop&) = delete;

  // Also sleep on `fd` (readable wakes the loop); Unwatch stops that.
  absl::Status Watch(int fd);
  void Unwatch(int fd);

  // Starts the thread. Once.
  void Start(Hooks hooks);

  // Queues `task` for the loop thread; false once Stop began (the task
  // will never run, and is destroyed here).
  bool Post(std::function<void()> task);
  // Post, then wait until `task` ran; false if it was refused. Not from
  // the loop thread.
  bool Call(std::function<void()> task);

  // Refuses new tasks, runs those already queued, and joins the thread.
  // Idempotent.
  void Stop();

 private:
  explicit ProgressLoop(std::function<absl::Duration()> spin) : spin_(std::move(spin)) {}
  void Run();
  bool RunTasks();  // true if there were any
  void Wake();

  const std::function<absl::Duration()> spin_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  Hooks hooks_;  // set by Start, then read by the loop thread only
  std::thread thread_;

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;  // in epoll_wait: Post must wake it
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // serializes Stop's join
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_PROGRESS_LOOP_H_
