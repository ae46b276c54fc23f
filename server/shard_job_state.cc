// ShardJob's state between steps (server/shard_job.h): snapshots for
// checkpoints and the requests for them, the state's digest and the job's
// stats, and the ReadState/WriteState transfers. The step protocol is in
// shard_job.cc, held steps in shard_job_hold.cc.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/digest.h"
#include "core/status_macros.h"
#include "server/shard_job.h"

namespace tessel {

ShardSnapshot ShardJob::SnapshotLocked() {
  const absl::Time t0 = absl::Now();
  ShardSnapshot s;
  s.job = spec_.job();
  s.shard = shard_;
  s.num_shards = spec_.num_shards();
  s.num_params = layout_.num_params();
  s.step = version_;
  s.epoch = epoch_;
  s.range = range_;
  s.keep_last = spec_.checkpoint().keep_last();
  const float* params = served_.values(version_);
  s.values.assign(params, params + served_.size());
  s.state = rule_->state();
  s.tensor_skips = settings_.skips();
  s.pause_us = absl::ToInt64Microseconds(absl::Now() - t0);
  last_pause_us_ = s.pause_us;
  s.spec_json = spec_json_;
  s.creator = creator_;
  if (shard_ == 0) {
    for (int shard = 1; shard < layout_.num_shards(); ++shard) {
      if (layout_.shard_empty(shard)) {
        s.empty_shards.emplace_back(shard, layout_.shard_range(shard));
      }
    }
  }
  return s;
}

absl::StatusOr<std::optional<ShardSnapshot>> ShardJob::RequestCheckpoint(int64_t step,
                                                                         bool cancel) {
  absl::MutexLock lock(&mu_);
  if (!rule_->holds_params()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(),
                     "DDP keeps parameters on the workers; shard servers checkpoint zero1, zero2 "
                     "and fsdp jobs"));
  }
  // A shard without elements takes no part in the steps (core/layout.h):
  // shard 0 writes its part of every checkpoint.
  if (layout_.shard_empty(shard_)) return std::optional<ShardSnapshot>();
  if (cancel) {
    checkpoints_.Cancel(step);
    return std::optional<ShardSnapshot>();
  }
  if (!initialized_) {
    return absl::FailedPreconditionError(absl::StrCat(Where(), "not initialized yet"));
  }
  if (step == version_ && !StepInProgressLocked()) {
    AwaitUpdatesLocked();
    return std::optional<ShardSnapshot>(SnapshotLocked());
  }
  if (step <= version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), "step ", step, " has passed or is in progress (the shard is at step ", version_,
        StepInProgressLocked() ? ", next step in progress" : "", "); ask for a later step"));
  }
  checkpoints_.Request(step);
  return std::optional<ShardSnapshot>();
}

void ShardJob::SetCheckpointProgress(const CheckpointProgress& p) {
  absl::MutexLock lock(&mu_);
  checkpoint_progress_ = p;
}

std::string ShardJob::DigestLocked() {
  AwaitUpdatesLocked();
  Digest d;
  d.UpdateInt(version_);
  d.UpdateInt(initialized_ ? 1 : 0);
  d.Update(served_.values(version_), served_.size() * sizeof(float));
  for (const auto& s : rule_->state()) d.Update(s.data(), s.size() * sizeof(float));
  const std::vector<int64_t>& skips = settings_.skips();
  if (!skips.empty()) d.Update(skips.data(), skips.size() * sizeof(int64_t));
  return d.Hex();
}

JobStats ShardJob::Stats(bool with_digest) {
  absl::MutexLock lock(&mu_);
  JobStats st;
  st.epoch = epoch_;
  st.step = version_;
  st.initialized = initialized_;
  const int64_t n = range_.size() * static_cast<int64_t>(sizeof(float));
  // Receive buffers as allocated: a rank whose pushes are read in place
  // (zero-copy) has none; top-k pushes land in small sparse buffers; prefix
  // order adds the accumulator.
  const int64_t received =
      reducer_.buffer_bytes() + static_cast<int64_t>(held_.size() * sizeof(float));
  if (rule_->holds_params()) {
    // fp32: the served masters of two versions; mixed precision: the
    // masters and two served half copies (served_versions.h).
    st.params_bytes = served_.bytes();
    st.optimizer_bytes = n * static_cast<int64_t>(rule_->state().size());
    st.grad_buffer_bytes = received;
  } else {
    st.grad_buffer_bytes = received + served_.bytes();  // and the mean it serves
  }
  st.retired_buffer_bytes = reducer_.retired_bytes();
  st.abandoned_completions = abandoned_completions_;
  if (with_digest) st.state_digest = DigestLocked();
  st.counters = counters_;
  st.step_in_progress = StepInProgressLocked();
  st.checkpoint = checkpoint_progress_;
  st.last_snapshot_pause_us = last_pause_us_;
  st.restored_from_step = restored_from_;
  st.worker_ids = worker_ids_;
  st.flight = pushes_.flight().Window();
  st.rank_pushed_bytes = pushes_.flight().pushed_bytes();
  st.rank_pulled_bytes = pushes_.flight().pulled_bytes();
  if (std::optional<absl::Time> started = pushes_.started()) {
    st.step_started_us = absl::ToUnixMicros(*started);
    st.waiting = pushes_.WaitingSlots();
    if (hold_.decided()) st.step_hold = hold_.held() ? 1 : 0;
  }
  st.pulls_waiting = pulls_.RanksWaitingFor(version_ + 1);
  st.buckets_updated = buckets_updated_;
  st.num_buckets = num_buckets_;
  return st;
}

std::vector<float> ShardJob::ParamsSnapshot() {
  absl::MutexLock lock(&mu_);
  AwaitUpdatesLocked();
  const float* params = served_.values(version_);
  return std::vector<float>(params, params + served_.size());
}

StateTransfer::Shard ShardJob::ShardLocked() const {
  return StateTransfer::Shard{epoch_, version_, initialized_, StepInProgressLocked(),
                              !pulls_.empty()};
}

absl::Status ShardJob::ReadState(int64_t step, int64_t epoch, int64_t offset, int64_t count,
                                 const std::function<void(const StateView&)>& out) {
  absl::MutexLock lock(&mu_);
  TESSEL_RETURN_IF_ERROR(transfer_.CheckRange(offset, count));
  TESSEL_RETURN_IF_ERROR(transfer_.CheckRead(ShardLocked(), step, epoch));
  StateView view;
  view.step = version_;
  view.range = range_;
  view.offset = offset;
  view.params = absl::MakeConstSpan(served_.values(version_) + offset, static_cast<size_t>(count));
  for (const auto& slot : rule_->state()) {
    view.state.push_back(absl::MakeConstSpan(slot.data() + offset, static_cast<size_t>(count)));
  }
  view.tensor_skips = settings_.skips();
  out(view);
  return absl::OkStatus();
}

absl::StatusOr<StateWritten> ShardJob::WriteState(const StateWrite& req) {
  absl::MutexLock lock(&mu_);
  TESSEL_ASSIGN_OR_RETURN(const bool commit, transfer_.Write(ShardLocked(), req));
  if (!commit) return StateWritten{transfer_.staged(), version_};
  if (rule_->holds_params()) {
    // The version the commit moves to is written in its own buffer.
    transfer_.CopyTo(absl::MakeSpan(served_.values(req.step), served_.size()), rule_->state());
    RefreshHalf(req.step, 0, served_.size());
    initialized_ = true;
  }
  version_ = req.step;
  hold_.Reset(req.step);
  settings_.ResetSkips(req.tensor_skips);
  pushes_.StopClock();
  transfer_.Drop();
  return StateWritten{0, version_};
}

}  // namespace tessel
