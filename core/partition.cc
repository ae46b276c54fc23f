#include "core/partition.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace tessel {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status CheckTensor(const TensorSpec& spec, int tp, int pp) {
  const std::string what = absl::StrCat("tensor '", spec.name, "' ", ShapeText(spec.shape));
  if (spec.shape.empty() || spec.shape.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a shape is [n] or [rows, cols], got ",
                                                   spec.shape.size(), " dimension(s)"));
  }
  for (int64_t d : spec.shape) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": sizes must be >= 1"));
  }
  if (spec.stage < 0 || spec.stage >= pp) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": stage ", spec.stage,
                                                   " is outside [0, pp=", pp,
                                                   "); give it a stage in [0, ", pp, ")"));
  }
  if (spec.split == TensorSplit::kReplicated) return absl::OkStatus();
  const int dim = spec.split == TensorSplit::kDim0 ? 0 : 1;
  if (dim >= static_cast<int>(spec.shape.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": split along dim 1 needs a 2-D shape; a vector splits along dim 0"));
  }
  if (spec.shape[dim] % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": split along dim ", dim, " over tp=", tp, " ranks, but ", spec.shape[dim],
        " is not divisible by ", tp, " (remainder ", spec.shape[dim] % tp,
        "); choose a tp that divides ", spec.shape[dim], " or change the tensor's size"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* TensorSplitName(TensorSplit split) {
  switch (split) {
    case TensorSplit::kReplicated:
      return "replicated";
    case TensorSplit::kDim0:
      return "split along dim 0";
    case TensorSplit::kDim1:
      return "split along dim 1";
  }
  return "?";
}

absl::StatusOr<PartitionPlan> PartitionPlan::Create(std::vector<TensorSpec> tensors, int tp,
                                                    int pp) {
  if (tp < 1 || pp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp and pp must each be >= 1, got tp=", tp, " pp=", pp));
  }
  absl::flat_hash_set<std::string> names;
  std::vector<int> per_stage(pp, 0);
  for (const TensorSpec& spec : tensors) {
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a tensor of shape ", ShapeText(spec.shape), " has no name"));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor name '", spec.name, "' appears twice; names must be unique"));
    }
    TESSEL_RETURN_IF_ERROR(CheckTensor(spec, tp, pp));
    ++per_stage[spec.stage];
  }
  for (int p = 0; p < pp; ++p) {
    if (per_stage[p] == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", p, " of pp=", pp, " holds no tensor (", tensors.size(),
          " tensor(s) in all); every pipeline stage needs at least one: use fewer stages or give "
          "stage ",
          p, " a tensor"));
    }
  }
  return PartitionPlan(std::move(tensors), tp, pp);
}

PartitionPlan::PartitionPlan(std::vector<TensorSpec> tensors, int tp, int pp)
    : tensors_(std::move(tensors)), tp_(tp), pp_(pp), stages_(pp) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorSpec& spec = tensors_[i];
    full_offsets_.push_back(full_size_);
    full_size_ += static_cast<size_t>(Numel(spec.shape));
    PartitionEntry e;
    e.tensor = static_cast<int>(i);
    e.name = spec.name;
    e.shape = spec.shape;
    if (spec.split == TensorSplit::kDim0) e.shape[0] /= tp_;
    if (spec.split == TensorSplit::kDim1) e.shape[1] /= tp_;
    Stage& stage = stages_[spec.stage];
    e.offset = stage.size;
    e.numel = static_cast<size_t>(Numel(e.shape));
    stage.size += e.numel;
    entry_index_.push_back(static_cast<int>(stage.entries.size()));
    stage.entries.push_back(std::move(e));
  }
}

int PartitionPlan::Find(absl::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

size_t PartitionPlan::full_numel(int tensor) const {
  return static_cast<size_t>(Numel(tensors_[tensor].shape));
}

const PartitionEntry& PartitionPlan::entry(int tensor) const {
  return stages_[tensors_[tensor].stage].entries[entry_index_[tensor]];
}

std::vector<TensorDesc> PartitionPlan::Layout(int stage) const {
  std::vector<TensorDesc> out;
  for (const PartitionEntry& e : partition(stage)) out.push_back({e.name, e.shape});
  return out;
}

std::vector<CopyRun> PartitionPlan::Runs(int tensor, int t) const {
  const TensorSpec& spec = tensors_[tensor];
  const PartitionEntry& e = entry(tensor);
  const size_t full = full_offsets_[tensor];
  const size_t rank = static_cast<size_t>(t);
  switch (spec.split) {
    case TensorSplit::kReplicated:
      return {{full, e.offset, e.numel}};
    case TensorSplit::kDim0:
      // Rows are contiguous: rank t's rows are one run.
      return {{full + rank * e.numel, e.offset, e.numel}};
    case TensorSplit::kDim1: {
      const size_t rows = static_cast<size_t>(spec.shape[0]);
      const size_t cols = static_cast<size_t>(spec.shape[1]);
      const size_t local = static_cast<size_t>(e.shape[1]);
      std::vector<CopyRun> runs;
      runs.reserve(rows);
      for (size_t r = 0; r < rows; ++r) {
        runs.push_back({full + r * cols + rank * local, e.offset + r * local, local});
      }
      return runs;
    }
  }
  return {};
}

absl::StatusOr<std::vector<float>> PartitionPlan::Slice(absl::Span<const float> full, int stage,
                                                        int t) const {
  if (full.size() != full_size_) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: the full vector has ", full.size(),
                                                   " floats, the model ", full_size_));
  }
  if (stage < 0 || stage >= pp_ || t < 0 || t >= tp_) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: partition (stage ", stage,
                                                   ", tensor rank ", t, ") is outside pp=", pp_,
                                                   ", tp=", tp_));
  }
  std::vector<float> part(partition_size(stage));
  for (const PartitionEntry& e : partition(stage)) {
    for (const CopyRun& run : Runs(e.tensor, t)) {
      std::copy_n(full.begin() + run.full_offset, run.count, part.begin() + run.part_offset);
    }
  }
  return part;
}

absl::StatusOr<std::vector<float>> PartitionPlan::Assemble(
    const std::vector<std::vector<float>>& parts) const {
  if (parts.size() != static_cast<size_t>(pp_ * tp_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Assemble needs pp*tp = ", pp_ * tp_, " partitions, got ", parts.size()));
  }
  for (int p = 0; p < pp_; ++p) {
    for (int t = 0; t < tp_; ++t) {
      if (parts[p * tp_ + t].size() != partition_size(p)) {
        return absl::InvalidArgumentError(absl::StrCat("partition (stage ", p, ", tensor rank ", t,
                                                       ") has ", parts[p * tp_ + t].size(),
                                                       " floats, expected ", partition_size(p)));
      }
    }
  }
  std::vector<float> full(full_size_);
  for (int p = 0; p < pp_; ++p) {
    const std::vector<float>& first = parts[p * tp_];
    for (int t = 0; t < tp_; ++t) {
      const std::vector<float>& part = parts[p * tp_ + t];
      for (const PartitionEntry& e : partition(p)) {
        // Replicated tensors: every copy must equal tensor rank 0's, bitwise.
        if (t > 0 && tensors_[e.tensor].split == TensorSplit::kReplicated) {
          for (size_t i = e.offset; i < e.offset + e.numel; ++i) {
            if (std::memcmp(&first[i], &part[i], sizeof(float)) != 0) {
              return absl::InternalError(absl::StrCat("replicated tensor ", e.name, " of stage ", p,
                                                      " differs between tensor ranks 0 and ", t,
                                                      " at element ", i - e.offset, " (", first[i],
                                                      " vs ", part[i], ")"));
            }
          }
        }
        for (const CopyRun& run : Runs(e.tensor, t)) {
          std::copy_n(part.begin() + run.part_offset, run.count, full.begin() + run.full_offset);
        }
      }
    }
  }
  return full;
}

}  // namespace tessel
