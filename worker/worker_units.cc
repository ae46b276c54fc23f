// Worker's fsdp unit steps (worker.h): gather, release, push (and push as a
// micro-batch part) a unit, and the step's end.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "worker/internal/worker_parts.h"
#include "worker/worker.h"

namespace tessel {

int Worker::num_units() const { return p_->units->size(); }
Range Worker::unit_range(int unit) const { return p_->units->range(unit); }
absl::Status Worker::Prefetch(int unit) { return p_->units->Prefetch(unit); }
absl::StatusOr<absl::Span<const float>> Worker::Gather(int unit) { return p_->units->Gather(unit); }
absl::StatusOr<absl::Span<const uint16_t>> Worker::GatherHalf(int unit) {
  return p_->units->GatherHalf(unit);
}
void Worker::Release(int unit) { p_->units->Release(unit); }
absl::Span<float> Worker::UnitGrads(int unit) { return p_->units->Grads(unit); }
absl::Span<uint16_t> Worker::UnitHalfGrads(int unit) { return p_->units->HalfGrads(unit); }

absl::Status Worker::PushUnit(int unit) {
  const bool fsdp = p_->ctx.fsdp();
  internal::BucketExchange* exchange = p_->exchange.get();
  return p_->units->Push(unit, [&](int shard, int bucket) {
    if (!fsdp) exchange->MarkPushed(shard, bucket);  // zero2: Step() checks every bucket went
  });
}

absl::Status Worker::PushUnitPart(int unit) {
  if (!p_->ctx.fsdp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(p_->ctx.Where(), ": PushUnitPart is for fsdp jobs"));
  }
  return p_->units->Push(
      unit, [](int, int) {}, /*part=*/true);
}

absl::Status Worker::Barrier(int64_t version) { return p_->units->Barrier(version); }

absl::Status Worker::FinishStep() {
  internal::JobContext& ctx = p_->ctx;
  if (!ctx.fsdp() || ctx.layout == nullptr) {
    return absl::FailedPreconditionError("FinishStep is for fsdp jobs; use Step()");
  }
  TESSEL_RETURN_IF_ERROR(ReleaseIfHeld());
  TESSEL_RETURN_IF_ERROR(p_->units->Barrier(ctx.step + 1));
  ++ctx.step;
  StepMetrics(StepPhases{}, 0);
  WatchCheckpoints();
  return AdmitNewcomers();
}

}  // namespace tessel
