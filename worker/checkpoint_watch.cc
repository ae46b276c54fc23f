#include "worker/checkpoint_watch.h"

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace tessel {

CheckpointWatch::CheckpointWatch(const WorkerOptions& options, absl::Time now)
    : interval_(options.checkpoint_interval),
      report_interval_(options.checkpoint_report_interval),
      checkpoints_(options.checkpoint.every_steps > 0 || options.checkpoint.initial ||
                   options.checkpoint_interval > absl::ZeroDuration()),
      job_(options.job),
      last_request_(now),
      last_report_(now) {}

void CheckpointWatch::AfterStep(absl::Time now, absl::string_view where, const RequestFn& request,
                                const StatsFn& stats) {
  if (interval_ > absl::ZeroDuration() && now - last_request_ >= interval_) {
    last_request_ = now;
    if (absl::Status s = request(); !s.ok()) {
      TESSEL_LOG(WARNING) << where << ": periodic checkpoint not scheduled: " << s;
    }
  }
  if (!checkpoints_ || now - last_report_ < report_interval_) return;
  last_report_ = now;
  absl::StatusOr<std::vector<v1::ShardStats>> all = stats();
  if (!all.ok()) return;  // the step's own waits report a server in trouble
  int64_t since = -1;
  std::string why;
  for (const v1::ShardStats& st : *all) {
    if (st.checkpoint_failing_since() < 0) continue;
    if (since < 0 || st.checkpoint_failing_since() < since) since = st.checkpoint_failing_since();
    absl::StrAppend(&why, why.empty() ? "" : "; ", st.checkpoint_error());  // "shard s: ..."
  }
  if (since >= 0 && since != failing_since_) {
    TESSEL_LOG(WARNING) << where << ": checkpoints have been failing since step " << since << " ("
                        << why
                        << "); training goes on, but a recovery would roll back to the newest "
                           "complete checkpoint (tesselctl checkpoint list --job "
                        << job_ << ")";
  } else if (since < 0 && failing_since_ >= 0) {
    TESSEL_LOG(INFO) << where << ": checkpoints succeed again";
  }
  failing_since_ = since;
}

}  // namespace tessel
