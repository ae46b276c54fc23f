// ShardJob's held steps (server/step_hold.h): clipping by the job-wide
// gradient norm while the gradients are pushed during backward. A held
// step's complete buckets are reduced into held_ and measured; NORM_ASK
// gets the shard's share of the norm; RELEASE gives the step's gradient
// multiplier and the held buckets are applied from held_, the same bits as
// an update that reduced them then (core/grad_norm.h).
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/grad_norm.h"
#include "server/shard_job.h"

namespace tessel {

absl::StatusOr<std::optional<ShardJob::NormReply>> ShardJob::AcceptNormAsk(const FrameHeader& h,
                                                                           uint64_t reply_to) {
  absl::MutexLock lock(&mu_);
  bool stale = false;
  if (absl::Status s = checks_.CheckHeld(h, FrameStateLocked(), &stale); !s.ok()) {
    return RefusedLocked(s, stale);
  }
  absl::StatusOr<std::optional<GradNormStats>> norm = hold_.AskNorm(h.step);
  if (!norm.ok()) return RefusedLocked(norm.status(), /*stale=*/false);
  NormReply reply{reply_to, h.rank, h.step, {}, absl::OkStatus()};
  if (!norm->has_value()) {  // answered when the step's last bucket is measured
    norm_waiters_.push_back(reply);
    return std::optional<NormReply>();
  }
  reply.stats = **norm;
  return std::optional<NormReply>(reply);
}

absl::StatusOr<std::vector<int>> ShardJob::AcceptRelease(const FrameHeader& h) {
  absl::MutexLock lock(&mu_);
  bool stale = false;
  if (absl::Status s = checks_.CheckHeld(h, FrameStateLocked(), &stale); !s.ok()) {
    return RefusedLocked(s, stale);
  }
  float multiplier = 0;
  std::memcpy(&multiplier, &h.bucket_count, sizeof(float));
  if (h.bucket_count != 0 && !(std::isfinite(multiplier) && multiplier > 0)) {
    return RefusedLocked(
        absl::InvalidArgumentError(absl::StrCat(
            Where(), "RELEASE of step ", h.step, " with gradient multiplier ", multiplier,
            ": it must be a positive finite float (0 bits: the step's own settings)")),
        /*stale=*/false);
  }
  absl::StatusOr<std::vector<int>> apply = hold_.Release(h.step, h.bucket_count);
  if (!apply.ok()) return RefusedLocked(apply.status(), /*stale=*/false);
  return apply;
}

bool ShardJob::ReduceHeld(int bucket, BucketStep* step, Serve* serve) {
  // Waits for a fold of this bucket that runs; none starts after.
  reducer_.BeginSum(bucket);
  const auto started = std::chrono::steady_clock::now();
  // Chunks may be summed on several threads at once (a large half bucket
  // over the UpdatePool): each chunk's stats are kept by its offset and
  // added in offset order, the same bits whatever thread took which.
  absl::Mutex parts_mu;
  std::map<int64_t, GradNormStats> parts;
  reducer_.SumChunks(bucket, [&](Range part, const float* const* srcs, int count) {
    const GradNormStats s =
        ReduceSumWithNorm(srcs, count, held_.data() + part.begin, static_cast<size_t>(part.size()),
                          world_, step->optimizer.grad_scale);
    absl::MutexLock lock(&parts_mu);
    parts[part.begin] = s;
  });
  GradNormStats stats;
  for (const auto& [begin, s] : parts) stats.Add(s);
  const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  // The borrowed pushes are read: back to their workers.
  serve->released = reducer_.EndSum(bucket);
  absl::MutexLock lock(&mu_);
  counters_.update_us += took_us;
  bool all_measured = false;
  if (hold_.Reduced(bucket, stats, &all_measured)) {
    HeldMultiplierLocked(step);  // a RELEASE came meanwhile: apply it now
    return true;
  }
  if (all_measured) AnswerNormsLocked(absl::OkStatus(), serve);
  --updates_running_;
  serve->version = version_;
  return false;
}

void ShardJob::HeldMultiplierLocked(BucketStep* step) const {
  const std::optional<uint32_t> bits = hold_.multiplier();
  if (!bits.has_value() || *bits == 0) return;
  std::memcpy(&step->optimizer.grad_scale, &*bits, sizeof(float));
}

void ShardJob::AnswerNormsLocked(const absl::Status& refusal, Serve* serve) {
  if (norm_waiters_.empty()) return;
  std::optional<GradNormStats> stats;
  if (refusal.ok()) {
    absl::StatusOr<std::optional<GradNormStats>> norm = hold_.AskNorm(hold_.step());
    if (norm.ok() && norm->has_value()) stats = **norm;
  }
  for (NormReply& n : norm_waiters_) {
    if (stats.has_value() && n.step == hold_.step()) {
      n.stats = *stats;
    } else {
      n.status = refusal.ok() ? absl::FailedPreconditionError(absl::StrCat(
                                    Where(), "NORM_ASK of step ", n.step, " cannot be answered"))
                              : refusal;
    }
    serve->norms.push_back(std::move(n));
  }
  norm_waiters_.clear();
}

}  // namespace tessel
