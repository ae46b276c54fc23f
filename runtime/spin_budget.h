// Polling only where there is a core for it.
//
// A Tessel thread that keeps polling (yielding) after its last work, the
// UCX progress thread and a shard server's update threads, starts the next
// message or bucket without a wake-up; but only while it has a core: with
// more polling threads on a host than cores they take turns, and every
// other process there (the workers' backward, the servers' updates) pays.
//
// SpinBudget counts the polling threads of a host: each process claims its
// own in a host-wide directory (default /dev/shm/tessel-spin, one file per
// process holding the count, kept under a shared flock: a file whose lock
// can be taken belongs to a process that is gone, and is removed). Fits()
// compares the sum with the cores this process may use
// (sched_getaffinity, and the cgroup v2 quota in /sys/fs/cgroup/cpu.max).
// Every claim and release also bumps a host-wide generation (the
// directory's `generation` file, mapped shared: one atomic load per
// Fits()), and Fits() reads the directory again once it moved (at most
// every 50 ms: a reading costs ~0.1 ms with 40 processes on the host, and
// a busy host's processes come and go): a process started a moment before
// the others sees them within 50 ms, where it
// used to poll as if alone for up to a second (which made one run of a
// 16 MiB step 1.5-1.8x slower than the next: issue 46). A process killed
// without releasing is noticed by the once-a-second reading.
// "Host" is what shares the directory: processes in network namespaces of
// one machine do; a container with its own /dev/shm counts its own threads
// against its own CPU limit.
//
// SpinPolicy turns a mode into each idle moment's polling window:
//   kSpin   always poll for `spin`, as before;
//   kEvent  never poll: sleep on the wake-up fd (UCX's event fd, a condition
//           variable) at once;
//   kAuto   poll for `spin` while the host's polling threads fit its cores,
//           else event-driven after a brief poll (kCrowdedPoll, or `spin` if
//           shorter): the reply to a message just sent is often that close,
//           and a wake-up costs more CPU than 200 us of polling (measured:
//           benchmarks/results/poll_window-2026-11-27.txt). Re-read within
//           50 ms of the host's generation moving (a claim or release
//           anywhere) and at least once a second (processes that died), so it follows
//           processes starting and stopping. The default everywhere.
//
// Threads: everything is thread-safe.
//
// Example (a thread that runs out of work):
//   SpinPolicy policy(SpinMode::kAuto, absl::Milliseconds(5), /*threads=*/1, "update");
//   absl::Duration window = policy.Window();  // poll this long, then sleep on the fd
#ifndef TESSEL_RUNTIME_SPIN_BUDGET_H_
#define TESSEL_RUNTIME_SPIN_BUDGET_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/spin_mode.h"

namespace tessel {

class SpinBudget {
 public:
  // The directory is created when first claimed in.
  explicit SpinBudget(std::string dir);
  ~SpinBudget();
  SpinBudget(const SpinBudget&) = delete;
  SpinBudget& operator=(const SpinBudget&) = delete;

  // The process-wide budget over /dev/shm/tessel-spin (TESSEL_SPIN_DIR
  // overrides the directory).
  static SpinBudget& Host();

  // This process polls with `threads` more threads until the claim is
  // destroyed. A claim that cannot be recorded (no /dev/shm) is logged once
  // and counts for this process only.
  class Claim {
   public:
    ~Claim();
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;

   private:
    friend class SpinBudget;
    Claim(SpinBudget* budget, int threads) : budget_(budget), threads_(threads) {}
    SpinBudget* const budget_;
    const int threads_;
  };
  std::unique_ptr<Claim> Take(int threads);

  struct Count {
    int threads = 0;  // polling threads claimed by live processes on the host
    int cores = 1;    // cores this process may use
  };
  // Reads the directory now.
  Count Read();
  // threads <= cores, from a reading at most 50 ms older than the last
  // claim or release on the host and at most a second old.
  bool Fits();

 private:
  void Add(int delta);
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The host's generation counter (mapped once; null where it cannot be).
  uint64_t* Generation();
  uint64_t* MapGeneration() const;
  uint64_t LoadGeneration();

  const std::string dir_;
  absl::Mutex mu_;
  int mine_ ABSL_GUARDED_BY(mu_) = 0;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;  // this process's file, flocked shared
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex read_mu_;
  std::atomic<int64_t> read_at_ns_{0};
  std::atomic<uint64_t> read_generation_{0};  // the generation that reading saw
  std::atomic<bool> fits_{true};
  absl::Mutex generation_mu_;  // one thread maps the counter
  std::atomic<bool> generation_tried_{false};
  std::atomic<uint64_t*> generation_{nullptr};
};

class SpinPolicy {
 public:
  // kAuto's polling window on a host with more polling threads than cores.
  static constexpr absl::Duration kCrowdedPoll = absl::Microseconds(200);

  // `threads` polling threads of this process follow this policy (claimed
  // in `budget` unless the mode is kEvent). `who` names them in the log
  // line printed when kAuto switches.
  SpinPolicy(SpinMode mode, absl::Duration spin, int threads, std::string who,
             SpinBudget* budget = &SpinBudget::Host());
  // How long to keep polling after the last work, now.
  absl::Duration Window();
  SpinMode mode() const { return mode_; }
  // kAuto's window on a crowded host: kCrowdedPoll, or `spin` if shorter.
  absl::Duration Crowded() const { return std::min(spin_, kCrowdedPoll); }
  // "spin 5ms", "event-driven", "auto: spin 5ms (4 polling threads <= 4
  // cores)", "auto: poll 200us, then sleep (6 polling threads > 2 cores)".
  std::string Describe();

 private:
  const SpinMode mode_;
  const absl::Duration spin_;
  const std::string who_;
  SpinBudget* const budget_;
  std::unique_ptr<SpinBudget::Claim> claim_;
  std::atomic<int> last_{-1};  // kAuto: 1 spinning, 0 event-driven, -1 not decided yet
};

}  // namespace tessel

#endif  // TESSEL_RUNTIME_SPIN_BUDGET_H_
