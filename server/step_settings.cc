#include "server/step_settings.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor_steps.h"

namespace tessel {

StepSettings::StepSettings(std::string where, const Layout& layout, int shard,
                           const OptimizerParams& optimizer)
    : where_(std::move(where)), layout_(layout), shard_(shard), optimizer_(optimizer) {
  const Range range = layout.shard_range(shard);
  for (const TensorSlot& t : layout.tensors()) owned_.push_back(t.range().Overlaps(range) ? 1 : 0);
}

absl::Status StepSettings::SetOptimizer(const OptimizerParams& optimizer, int64_t step,
                                        int64_t version, bool applying) {
  absl::Status valid = ValidateOptimizerParams(optimizer);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(where_, valid.message()));
  if (optimizer.kind != optimizer_.kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        where_, "the optimizer is ", OptimizerKindName(optimizer_.kind), "; it cannot become ",
        OptimizerKindName(optimizer.kind), " (its state would not fit)"));
  }
  // A shard without elements takes no part in the steps (core/layout.h): it
  // has nothing to apply the settings to, whatever step they are for.
  if (step != version + 1 && !layout_.shard_empty(shard_)) {
    return absl::FailedPreconditionError(absl::StrCat(
        where_, "new optimizer settings from step ", step, " but the shard is at step ", version,
        ": set them between steps, before pushing step ", version + 1));
  }
  if (applying) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "step ", step, " is already being applied (every rank pushed some of ",
                     "its buckets): set new optimizer settings before pushing a step"));
  }
  optimizer_ = optimizer;
  return absl::OkStatus();
}

absl::Status StepSettings::SkipTensors(const std::vector<int32_t>& tensors, int64_t step,
                                       int64_t version,
                                       const std::function<bool(int bucket)>& complete) {
  std::vector<uint8_t> mask;
  absl::Status valid =
      SkipMaskFromIndices(tensors, static_cast<int>(layout_.tensors().size()), &mask);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where_, "SkipTensors: ", valid.message()));
  }
  // A shard without elements holds none of the tensors and has no step
  // (core/layout.h): nothing to skip, nothing kept.
  if (layout_.shard_empty(shard_)) return absl::OkStatus();
  if (step != version + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(where_, "tensors to skip at step ", step, " but the shard is at step ",
                     version, ": send them before pushing step ", version + 1));
  }
  if (!skip_now_.empty() || !mask.empty()) {
    if (!skip_now_.empty() && skip_now_ != mask) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_, "another rank skips a different set of tensors at step ", step,
                       ": every rank must skip the same ones (those no rank has a gradient for)"));
    }
    const int buckets = layout_.num_buckets(shard_);
    for (int b = 0; b < buckets && skip_now_.empty(); ++b) {
      if (!complete(b)) continue;
      const Range br = layout_.bucket_range(shard_, b);
      for (int32_t t : tensors) {
        const TensorSlot& ts = layout_.tensors()[static_cast<size_t>(t)];
        if (ts.range().Overlaps(br)) {
          return absl::FailedPreconditionError(absl::StrCat(
              where_, "tensor '", ts.name, "' cannot be skipped at step ", step, ": bucket ", b,
              ", which holds it, has been pushed by every rank already"));
        }
      }
    }
  }
  skip_now_ = std::move(mask);
  return absl::OkStatus();
}

BucketStep StepSettings::ForUpdate(int64_t step) const {
  BucketStep s;
  s.step = step;
  s.optimizer = optimizer_;
  s.skips = skips_;
  s.skip_now = skip_now_;
  return s;
}

void StepSettings::EndStep() {
  for (size_t t = 0; t < skip_now_.size(); ++t) skip_now_[t] &= owned_[t];
  AdvanceSkips(skip_now_, &skips_);
  skip_now_.clear();
}

void StepSettings::ResetSkips(std::vector<int64_t> skips) {
  skips_ = NoSkips(skips) ? std::vector<int64_t>() : std::move(skips);
  skip_now_.clear();
}

}  // namespace tessel
