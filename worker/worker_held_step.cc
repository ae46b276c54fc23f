// Worker's held steps (worker.h "held steps"): clipping by the job-wide
// gradient norm, taken on the shard servers where the reduced gradient lives
// (server/step_hold.h), with the gradients pushed during backward.
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "worker/internal/worker_parts.h"
#include "worker/worker.h"

namespace tessel {

absl::Status Worker::HoldUpdates(bool hold) {
  internal::JobContext& ctx = p_->ctx;
  if (hold && ctx.ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(),
                     ": ddp workers apply the update, and clip it, themselves; "
                     "held steps are for zero1, zero2 and fsdp"));
  }
  if (hold && p_->exchange != nullptr && p_->exchange->aggregator().active()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": held steps do not go through host aggregation"));
  }
  ctx.hold_update.store(hold, std::memory_order_relaxed);
  return absl::OkStatus();
}

bool Worker::holding_updates() const { return p_->ctx.hold_update.load(std::memory_order_relaxed); }

absl::StatusOr<GradNormStats> Worker::HeldGradientNorm() {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr) {
    return absl::FailedPreconditionError("HeldGradientNorm before RegisterLayout");
  }
  if (!holding_updates()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": step ", ctx.step + 1,
                     " is not held: HoldUpdates(true) before the step's first push to clip it"));
  }
  if (p_->released_step == ctx.step) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Where(), ": step ", ctx.step + 1, " was released already; ask for its norm first"));
  }
  if (!ctx.fsdp()) TESSEL_RETURN_IF_ERROR(p_->exchange->PushRemaining());
  const Layout& layout = *ctx.layout;
  internal::DataChannel& channel = *p_->channel;
  const int shards = channel.num_shards();
  for (int s = 0; s < shards; ++s) {
    if (!layout.shard_empty(s))
      channel.Send(channel.Header(FrameType::kNormAsk, ctx.step, s, 0), nullptr);
  }
  std::vector<std::optional<GradNormStats>> got(static_cast<size_t>(shards));
  int missing = 0;
  for (int s = 0; s < shards; ++s) missing += layout.shard_empty(s) ? 0 : 1;
  TESSEL_RETURN_IF_ERROR(channel.WaitFor(
      [&] {
        for (int s = 0; s < shards; ++s) {
          if (layout.shard_empty(s) || got[static_cast<size_t>(s)].has_value()) continue;
          got[static_cast<size_t>(s)] = channel.TakeNorm(s, ctx.step);
          if (got[static_cast<size_t>(s)].has_value()) --missing;
        }
        return missing == 0;
      },
      [&] {
        return absl::StrCat("the gradient norm of step ", ctx.step + 1, " (", missing,
                            " shard(s) not answered)");
      }));
  GradNormStats total;
  for (const std::optional<GradNormStats>& s : got) {
    if (s.has_value()) total.Add(*s);  // shard order: the same bits on every rank
  }
  return total;
}

absl::Status Worker::ReleaseStep(float multiplier) {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr)
    return absl::FailedPreconditionError("ReleaseStep before RegisterLayout");
  if (!holding_updates()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": step ", ctx.step + 1, " is not held"));
  }
  if (multiplier != 0 && !(std::isfinite(multiplier) && multiplier > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.Where(),
                     ": the gradient multiplier must be a positive finite float (0: the step's "
                     "own settings), got ",
                     multiplier));
  }
  if (p_->released_step == ctx.step) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": step ", ctx.step + 1, " was released already"));
  }
  uint32_t bits = 0;
  std::memcpy(&bits, &multiplier, sizeof(float));
  internal::DataChannel& channel = *p_->channel;
  for (int s = 0; s < channel.num_shards(); ++s) {
    if (ctx.layout->shard_empty(s)) continue;
    FrameHeader h = channel.Header(FrameType::kRelease, ctx.step, s, 0);
    h.bucket_count = bits;
    channel.Send(h, nullptr);
  }
  p_->released_step = ctx.step;
  return absl::OkStatus();
}

absl::Status Worker::PullMean() {
  internal::JobContext& ctx = p_->ctx;
  if (ctx.layout == nullptr || !ctx.ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx.Where(), ": PullMean is for ddp jobs after RegisterLayout"));
  }
  if (p_->pulled_mean_step == ctx.step) {
    return absl::FailedPreconditionError(absl::StrCat(ctx.Where(), ": the mean of step ",
                                                      ctx.step + 1,
                                                      " was pulled already; Step() applies it"));
  }
  TESSEL_RETURN_IF_ERROR(p_->exchange->Exchange(ctx.step + 1));
  p_->pulled_mean_step = ctx.step;
  return absl::OkStatus();
}

absl::Status Worker::ReleaseIfHeld() {
  if (!holding_updates() || p_->released_step == p_->ctx.step) return absl::OkStatus();
  return ReleaseStep(0);
}

}  // namespace tessel
