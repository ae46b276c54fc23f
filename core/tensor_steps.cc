#include "core/tensor_steps.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessel {

void ForEachUpdateRun(const Layout& layout, Range r, int64_t step, absl::Span<const int64_t> skips,
                      absl::Span<const uint8_t> skip_now,
                      const std::function<void(Range, int64_t)>& fn) {
  if (r.empty()) return;
  if (skips.empty() && skip_now.empty()) {
    fn(r, step);
    return;
  }
  const std::vector<TensorSlot>& tensors = layout.tensors();
  // The first tensor ending after r.begin.
  auto it =
      std::upper_bound(tensors.begin(), tensors.end(), r.begin,
                       [](int64_t at, const TensorSlot& t) { return at < t.offset + t.numel; });
  Range run{r.begin, r.begin};
  int64_t run_step = -1;
  for (; it != tensors.end() && it->offset < r.end; ++it) {
    const size_t t = static_cast<size_t>(it - tensors.begin());
    const Range part{std::max(r.begin, it->offset), std::min(r.end, it->offset + it->numel)};
    if (part.empty()) continue;
    const bool skipped = t < skip_now.size() && skip_now[t] != 0;
    const int64_t t_step = step - (t < skips.size() ? skips[t] : 0);
    if (!run.empty() && (skipped || t_step != run_step || part.begin != run.end)) {
      fn(run, run_step);
      run = Range{part.begin, part.begin};
    }
    if (skipped) continue;
    if (run.empty()) run.begin = part.begin;
    run.end = part.end;
    run_step = t_step;
  }
  if (!run.empty()) fn(run, run_step);
}

void AdvanceSkips(absl::Span<const uint8_t> skip_now, std::vector<int64_t>* skips) {
  for (size_t t = 0; t < skip_now.size(); ++t) {
    if (skip_now[t] == 0) continue;
    if (skips->size() < skip_now.size()) skips->resize(skip_now.size(), 0);
    ++(*skips)[t];
  }
}

absl::Status SkipMaskFromIndices(absl::Span<const int32_t> tensors, int num_tensors,
                                 std::vector<uint8_t>* mask) {
  std::vector<uint8_t> out(static_cast<size_t>(num_tensors), 0);
  for (int32_t t : tensors) {
    if (t < 0 || t >= num_tensors) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor index ", t, " is outside [0, ", num_tensors, ")"));
    }
    if (out[static_cast<size_t>(t)] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor index ", t, " is given twice"));
    }
    out[static_cast<size_t>(t)] = 1;
  }
  if (tensors.empty()) out.clear();
  *mask = std::move(out);
  return absl::OkStatus();
}

absl::Status ValidateSkips(absl::Span<const int64_t> skips, int num_tensors, int64_t step) {
  if (skips.empty()) return absl::OkStatus();
  if (skips.size() != static_cast<size_t>(num_tensors)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor_skips has ", skips.size(), " counts for ", num_tensors, " tensors"));
  }
  for (size_t t = 0; t < skips.size(); ++t) {
    if (skips[t] < 0 || skips[t] > step) {
      return absl::InvalidArgumentError(absl::StrCat("tensor_skips[", t, "] = ", skips[t],
                                                     " is outside [0, ", step, "] (the step)"));
    }
  }
  return absl::OkStatus();
}

void MergeSkips(absl::Span<const int64_t> shard_skips, std::vector<int64_t>* merged) {
  if (merged->size() < shard_skips.size()) merged->resize(shard_skips.size(), 0);
  for (size_t t = 0; t < shard_skips.size(); ++t) {
    (*merged)[t] = std::max((*merged)[t], shard_skips[t]);
  }
}

bool NoSkips(absl::Span<const int64_t> skips) {
  return std::all_of(skips.begin(), skips.end(), [](int64_t s) { return s == 0; });
}

}  // namespace tessel
