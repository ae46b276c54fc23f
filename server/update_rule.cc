#include "server/update_rule.h"

#include <functional>

#include "core/reduce.h"
#include "core/tensor_steps.h"

namespace tessel {

std::unique_ptr<UpdateRule> MakeUpdateRule(bool ddp, const Layout& layout, Range range, int world,
                                           const OptimizerParams& optimizer) {
  if (ddp) return std::make_unique<DdpMean>(world);
  return std::make_unique<ZeroUpdate>(layout, range, world, optimizer);
}

ZeroUpdate::ZeroUpdate(const Layout& layout, Range range, int world,
                       const OptimizerParams& optimizer)
    : layout_(layout), range_(range), world_(world) {
  const size_t n = static_cast<size_t>(range.size());
  state_.assign(StateSlots(optimizer), std::vector<float>(n, 0.f));
  float* state[kMaxStateSlots] = {};
  for (size_t k = 0; k < state_.size(); ++k) state[k] = state_[k].data();
  InitState(optimizer, state, n);
}

void ZeroUpdate::Apply(const BucketStep& s, Range part, const float* const* srcs, int count,
                       float* values) {
  thread_local std::vector<const float*> run_srcs;
  const Range global{range_.begin + part.begin, range_.begin + part.end};
  // Per run of tensors at the same step; tensors no rank had a gradient
  // for are left alone (one run, at `step`, unless some tensor was skipped).
  ForEachUpdateRun(layout_, global, s.step, s.skips, s.skip_now, [&](Range run, int64_t t_step) {
    const size_t at = static_cast<size_t>(run.begin - range_.begin);
    const size_t rel = at - static_cast<size_t>(part.begin);
    float* state[kMaxStateSlots] = {};
    for (size_t k = 0; k < state_.size(); ++k) state[k] = state_[k].data() + at;
    const float* const* from = srcs;
    if (rel != 0) {  // a later run of the chunk (only when some tensor was skipped)
      run_srcs.resize(static_cast<size_t>(count));
      for (int r = 0; r < count; ++r) run_srcs[r] = srcs[r] + rel;
      from = run_srcs.data();
    }
    ReduceAndApply(s.optimizer, t_step, values + at, from, count, state,
                   static_cast<size_t>(run.size()), world_);
  });
}

void DdpMean::Apply(const BucketStep&, Range part, const float* const* srcs, int count,
                    float* values) {
  ReduceMean(srcs, count, values + part.begin, static_cast<size_t>(part.size()), world_);
}

}  // namespace tessel
