#include "server/stall_watcher.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "runtime/log.h"

namespace tessel {

StallWatcher::StallWatcher(JobSource jobs, absl::Duration stall, Reporter report)
    : jobs_(std::move(jobs)), stall_(stall), report_(std::move(report)) {
  thread_ = std::thread([this] { Run(); });
}

StallWatcher::~StallWatcher() {
  stop_.Notify();
  thread_.join();
}

void StallWatcher::Run() {
  const absl::Duration period = std::min(absl::Seconds(1), stall_ / 2);
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    for (const auto& job : jobs_()) {
      if (auto report = job->StallReport(absl::Now(), stall_)) {
        if (report_) {
          report_(*report);
        } else {
          TESSEL_LOG(WARNING) << *report;
        }
      }
    }
  }
}

}  // namespace tessel
