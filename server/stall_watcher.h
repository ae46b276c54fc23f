// StallWatcher: names the ranks and buckets a stalled step waits for. A
// worker that dies or hangs mid-step leaves its shard servers waiting; the
// watcher polls every job's ShardJob::StallReport and hands each report to
// `report` (default: a WARNING log line), so the culprit is named in the
// server's log rather than leaving a silent hang.
//
// Contract: a step in progress for `stall` or longer is reported once, then
// again every `stall` while it stays stuck (ShardJob::StallReport's rate
// limit); a step that ends is not reported again. Reports come within one
// wake-up (min(1 s, stall / 2)) of becoming due.
//
// Threads: owns one thread, which calls `jobs` and `report`; the destructor
// stops and joins it within one wake-up.
//
// Example:
//   StallWatcher watcher([&] { return table.Jobs(); }, absl::Seconds(30));
#ifndef TESSEL_SERVER_STALL_WATCHER_H_
#define TESSEL_SERVER_STALL_WATCHER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/shard_job.h"

namespace tessel {

class StallWatcher {
 public:
  using JobSource = std::function<std::vector<std::shared_ptr<ShardJob>>()>;
  using Reporter = std::function<void(const std::string&)>;

  // `stall` must be positive. A null `report` logs a WARNING.
  StallWatcher(JobSource jobs, absl::Duration stall, Reporter report = nullptr);
  ~StallWatcher();

  StallWatcher(const StallWatcher&) = delete;
  StallWatcher& operator=(const StallWatcher&) = delete;

 private:
  void Run();

  const JobSource jobs_;
  const absl::Duration stall_;
  const Reporter report_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STALL_WATCHER_H_
