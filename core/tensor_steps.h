// Per-tensor step counts: torch's rule for parameters without a gradient.
//
// torch.optim updates a parameter only in steps where it has a gradient
// (p.grad is not None): a parameter with none keeps its value and its state,
// weight decay and momentum included, and its state['step'] counts only the
// steps that updated it (Adam's bias corrections, Adagrad's lr_decay and
// SGD's first-step momentum read it). A Tessel job therefore keeps, per
// tensor, how many of its steps skipped that tensor ("skips"): tensor t's
// torch step at job step s is s - skips[t]. An empty skips vector means no
// tensor was ever skipped, the common case, which costs nothing.
//
// A step's skipped tensors ("skip_now", one byte per tensor, empty = none)
// are the tensors no rank had a gradient for: on one rank of several, the
// others' gradients still count (its zero is part of the mean), exactly as
// single-process training on the whole batch would see them.
//
// Pure logic: no I/O, no threads.
//
// Example (a shard's bucket update):
//   ForEachUpdateRun(layout, bucket, step, skips, skip_now, [&](Range run, int64_t t_step) {
//     ApplyUpdate(p, t_step, params + run.begin - base, grad + run.begin - base, ...);
//   });
//   AdvanceSkips(skip_now, &skips);  // once, when the step completes
#ifndef TESSEL_CORE_TENSOR_STEPS_H_
#define TESSEL_CORE_TENSOR_STEPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/layout.h"

namespace tessel {

// Calls fn(run, tensor_step) for the maximal runs of element range `r`
// (absolute, within the layout) whose tensors are updated at job step `step`
// with the same tensor step (step - skips[t]), in increasing order; tensors
// with skip_now[t] != 0 are left out. Without skips and skip_now: one call,
// fn(r, step).
void ForEachUpdateRun(const Layout& layout, Range r, int64_t step, absl::Span<const int64_t> skips,
                      absl::Span<const uint8_t> skip_now,
                      const std::function<void(Range, int64_t)>& fn);

// Counts a completed step's skipped tensors into `skips` (sized to the
// tensor count on the first skip).
void AdvanceSkips(absl::Span<const uint8_t> skip_now, std::vector<int64_t>* skips);

// skip_now from tensor indices: InvalidArgument naming the index if one is
// outside [0, num_tensors) or repeated.
absl::Status SkipMaskFromIndices(absl::Span<const int32_t> tensors, int num_tensors,
                                 std::vector<uint8_t>* mask);

// Skips as saved (checkpoints, state blobs): empty, or one count per tensor,
// each in [0, step]. InvalidArgument otherwise, naming the problem.
absl::Status ValidateSkips(absl::Span<const int64_t> skips, int num_tensors, int64_t step);

// A job's skips from its shards' (each counts only the tensors in its range,
// and holds 0 or an older count for the others): the element-wise maximum.
void MergeSkips(absl::Span<const int64_t> shard_skips, std::vector<int64_t>* merged);

// True if every count is 0 (then the vector can be dropped).
bool NoSkips(absl::Span<const int64_t> skips);

}  // namespace tessel

#endif  // TESSEL_CORE_TENSOR_STEPS_H_
