#include "server/step_hold.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessel {

StepHold::StepHold(std::string where, int num_buckets)
    : where_(std::move(where)),
      num_buckets_(num_buckets),
      buckets_(static_cast<size_t>(num_buckets), Bucket::kPending),
      stats_(static_cast<size_t>(num_buckets)) {}

absl::Status StepHold::OnPush(bool held) {
  if (!decided_) {
    decided_ = true;
    held_ = held;
    return absl::OkStatus();
  }
  if (held == held_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(where_, "a push of step ", step_, held ? " holds" : " does not hold",
                   " the update for a clipping factor, but the step's first push ",
                   held_ ? "did" : "did not", ": every rank must clip the same steps"));
}

StepHold::Action StepHold::Begin(int bucket) {
  Bucket& b = buckets_[static_cast<size_t>(bucket)];
  if (b == Bucket::kApplying) return Action::kApply;
  if (held() && !multiplier_.has_value()) {
    b = Bucket::kReducing;
    return Action::kReduce;
  }
  b = Bucket::kApplying;
  return Action::kUpdate;
}

bool StepHold::Reduced(int bucket, const GradNormStats& stats, bool* all_measured) {
  stats_[static_cast<size_t>(bucket)] = stats;
  *all_measured = ++measured_ == num_buckets_;
  Bucket& b = buckets_[static_cast<size_t>(bucket)];
  if (multiplier_.has_value()) {
    b = Bucket::kApplying;
    return true;
  }
  b = Bucket::kReduced;
  return false;
}

GradNormStats StepHold::TotalLocked() const {
  GradNormStats total;
  for (const GradNormStats& s : stats_) total.Add(s);  // bucket order: the same bits every time
  return total;
}

absl::StatusOr<std::optional<GradNormStats>> StepHold::AskNorm(int64_t step) const {
  // A slower rank's ask of the step another rank's RELEASE just applied.
  if (step == last_step_ && last_stats_.has_value()) return last_stats_;
  if (step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "NORM_ASK of step ", step, ", but the shard is at step ", step_,
                     step < step_ ? " (that step was applied; its norm is gone)" : " (not begun)"));
  }
  if (decided_ && !held_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "NORM_ASK of step ", step,
                     ", whose pushes did not hold the update (kFrameHoldUpdate): hold the step "
                     "before its first push to clip it"));
  }
  if (measured_ == num_buckets_) return std::optional<GradNormStats>(TotalLocked());
  if (multiplier_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "NORM_ASK of step ", step,
                     ", which a rank released before every bucket was measured: every rank "
                     "must ask for the norm before any releases the step"));
  }
  return std::optional<GradNormStats>();
}

absl::StatusOr<std::vector<int>> StepHold::Release(int64_t step, uint32_t bits) {
  std::vector<int> apply;
  if (step == last_step_ && step < step_) {
    if (last_multiplier_.has_value() && *last_multiplier_ == bits) return apply;  // a slower rank's
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "RELEASE of step ", step, " with multiplier bits ", bits,
                     last_multiplier_.has_value()
                         ? absl::StrCat(", but the step was applied with ", *last_multiplier_,
                                        ": the ranks disagree on the clipping factor")
                         : ", which was not held"));
  }
  if (step != step_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "RELEASE of step ", step, ", but the shard is at step ", step_));
  }
  if (decided_ && !held_) {
    return absl::FailedPreconditionError(absl::StrCat(
        where_, "RELEASE of step ", step,
        ", whose pushes did not hold the update: every rank must clip the same steps"));
  }
  if (multiplier_.has_value()) {
    if (*multiplier_ == bits) return apply;
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "RELEASE of step ", step, " with multiplier bits ", bits,
                     ", but another rank's said ", *multiplier_,
                     ": the ranks disagree on the clipping factor (the first one applies)"));
  }
  multiplier_ = bits;
  for (int b = 0; b < num_buckets_; ++b) {
    if (buckets_[static_cast<size_t>(b)] == Bucket::kReduced) {
      buckets_[static_cast<size_t>(b)] = Bucket::kApplying;
      apply.push_back(b);
    }
  }
  return apply;
}

void StepHold::EndStep() {
  const int64_t ended = step_;
  const std::optional<uint32_t> applied = held() ? multiplier_ : std::nullopt;
  std::optional<GradNormStats> stats;
  if (held() && measured_ == num_buckets_) stats = TotalLocked();
  Reset(step_ + 1);
  last_step_ = ended;
  last_multiplier_ = applied;
  last_stats_ = stats;
}

void StepHold::Reset(int64_t step) {
  step_ = step;
  decided_ = false;
  held_ = false;
  multiplier_.reset();
  std::fill(buckets_.begin(), buckets_.end(), Bucket::kPending);
  std::fill(stats_.begin(), stats_.end(), GradNormStats{});
  measured_ = 0;
  last_step_ = -1;
  last_multiplier_.reset();
  last_stats_.reset();
}

std::string StepHold::Waiting() const {
  if (!held() || multiplier_.has_value()) return "";
  return absl::StrCat("the held step's RELEASE (clipping: ", measured_, " of ", num_buckets_,
                      " buckets reduced and measured; every rank's clip_grad_norm_ or "
                      "Worker::ReleaseStep releases it)");
}

}  // namespace tessel
