#include "server/update_rule.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/reduce.h"
#include "core/tensor_steps.h"
#include "server/update_pool.h"

namespace tessel {
namespace {

// Runs apply(sub, sub_srcs) over `part`: split over the calling compute
// thread's UpdatePool when there is one and the part is large enough (each
// chunk's sources are the part's, moved to the chunk's first element), else
// once over the whole part. Element-wise updates: the same bits either way.
template <typename Fn>
void SplitPart(Range part, const float* const* srcs, int count, const Fn& apply) {
  UpdatePool* pool = UpdatePool::Current();
  const size_t n = static_cast<size_t>(part.size());
  if (pool == nullptr || pool->threads() == 1 || n < 2 * UpdatePool::kMinChunk) {
    apply(part, srcs);
    return;
  }
  pool->ParallelFor(n, UpdatePool::kMinChunk, [&](size_t begin, size_t end) {
    thread_local std::vector<const float*> at;
    at.resize(static_cast<size_t>(count));
    for (int r = 0; r < count; ++r) at[r] = srcs[r] + begin;
    const int64_t b = part.begin + static_cast<int64_t>(begin);
    apply(Range{b, b + static_cast<int64_t>(end - begin)}, at.data());
  });
}

}  // namespace

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
                       const float* in, float* out) {
  SplitPart(part, srcs, count, [&](Range sub, const float* const* sub_srcs) {
    ApplyOnThisThread(s, sub, sub_srcs, count, in, out);
  });
}

void ZeroUpdate::ApplyOnThisThread(const BucketStep& s, Range part, const float* const* srcs,
                                   int count, const float* in, float* out) {
  thread_local std::vector<const float*> run_srcs;
  const Range global{range_.begin + part.begin, range_.begin + part.end};
  // Out of place, the skipped tensors between the runs are carried over.
  int64_t carried = part.begin;  // shard offset: [part.begin, carried) is written
  const auto carry_to = [&](int64_t end) {
    if (in != out && end > carried) {
      std::memcpy(out + carried, in + carried, static_cast<size_t>(end - carried) * sizeof(float));
    }
    carried = std::max(carried, end);
  };
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
    carry_to(static_cast<int64_t>(at));
    ReduceAndApply(s.optimizer, t_step, in + at, out + at, from, count, state,
                   static_cast<size_t>(run.size()), world_);
    carried = static_cast<int64_t>(at) + run.size();
  });
  carry_to(part.end);
}

void DdpMean::Apply(const BucketStep&, Range part, const float* const* srcs, int count,
                    const float*, float* out) {
  SplitPart(part, srcs, count, [&](Range sub, const float* const* sub_srcs) {
    ReduceMean(sub_srcs, count, out + sub.begin, static_cast<size_t>(sub.size()), world_);
  });
}

}  // namespace tessel
