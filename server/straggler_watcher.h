// StragglerWatcher: names the slow rank of each job on this shard server
// and explains a stalled step. Once a `period` it reads every job's flight
// recorder (JobStats::flight, server/flight_recorder.h) and
//   - scores the ranks (core/straggler.h: 1.0 = the median rank's pace) and
//     sets tessel_rank_lateness_seconds{job,rank,shard} and
//     tessel_rank_straggler_score{job,rank,shard};
//   - logs one line when a rank starts being a straggler and one when it
//     stops, naming the rank, its registry rank, and its host and pid
//     (`who`, from the registry's view of the job's group);
//   - when a step has been in progress for `stall`, writes the window as a
//     timeline (server/flight_dump.h) into `dump_dir` once per stalled step
//     and logs the path.
// stragglers() is who is named now, for the registry (the server's
// heartbeats carry it to /status.json and to rank 0).
//
// Threads: Start() starts one thread that calls Pass; Stop() (or the
// destructor) stops and joins it within one period. Pass and stragglers() may be called from
// any thread (tests call Pass directly, without Start).
//
// Example:
//   StragglerWatcher w([&] { return table.Jobs(); }, {.shard = 0});
//   w.Start();
#ifndef TESSEL_SERVER_STRAGGLER_WATCHER_H_
#define TESSEL_SERVER_STRAGGLER_WATCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/straggler.h"
#include "server/shard_job.h"

namespace tessel {

struct StragglerWatcherOptions {
  int shard = 0;
  absl::Duration period = absl::Milliseconds(250);
  // A step in progress this long has its flight recorder written (0: never).
  absl::Duration stall = absl::Seconds(30);
  std::string dump_dir;  // "" : $TMPDIR or /tmp
  StragglerRule rule;
};

// A rank named now by this server.
struct NamedStraggler {
  std::string job;
  int rank = 0;           // data-parallel rank (host aggregation: its group)
  int registry_rank = 0;  // the rank it joined the registry with
  double score = 0;
  double lateness_s = 0;
  absl::Time since;
};

class StragglerWatcher {
 public:
  using JobSource = std::function<std::vector<std::shared_ptr<ShardJob>>()>;
  // "host h pid p" of a job's worker (by registry rank), "" if not known.
  using WhoIs = std::function<std::string(const std::string& job, int registry_rank)>;
  using Reporter = std::function<void(const std::string&)>;

  // A null `who` names no host; a null `report` logs (WARNING when a rank
  // starts being a straggler or a step stalls, INFO when it ends).
  StragglerWatcher(JobSource jobs, StragglerWatcherOptions options, WhoIs who = nullptr,
                   Reporter report = nullptr);
  ~StragglerWatcher();
  StragglerWatcher(const StragglerWatcher&) = delete;
  StragglerWatcher& operator=(const StragglerWatcher&) = delete;

  void Start();
  // Stops and joins the thread (also the destructor's); Pass and
  // stragglers() may still be called.
  void Stop();
  // One look at every job at `now`.
  void Pass(absl::Time now);
  std::vector<NamedStraggler> stragglers();
  // The flight timelines written so far (the newest last), for tests.
  std::vector<std::string> dumps();

 private:
  struct JobState {
    StragglerSet set;
    std::map<int, absl::Time> since;
    std::map<int, int> registry_rank;  // of each rank named
    int64_t dumped_start_us = -1;      // the stalled step last written
    bool groups = false;               // slots are host groups, not ranks
  };
  void Report(bool warning, const std::string& line);
  void Look(const std::string& job, const JobStats& st, absl::Time now, JobState* state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DumpIfStalled(const std::string& job, const JobStats& st, absl::Time now, JobState* state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const JobSource jobs_;
  const StragglerWatcherOptions options_;
  const WhoIs who_;
  const Reporter report_;
  absl::Mutex mu_;
  std::map<std::string, JobState> state_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> dumps_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STRAGGLER_WATCHER_H_
