// PartitionPlan: how a model's tensors are cut for hybrid tensor x pipeline
// parallelism (worker/hybrid.h), described once, tensor by tensor.
//
// A model is a list of tensors, each with a name, a shape [rows, cols] (or
// [n] for a vector), how tensor parallelism splits it over the tp ranks of a
// stage, and the pipeline stage that holds it:
//   - kReplicated: every tensor rank holds all of it;
//   - kDim0 (a column-parallel weight, or its bias): tensor rank t holds rows
//     [t*rows/tp, (t+1)*rows/tp) (elements of a vector);
//   - kDim1 (a row-parallel weight): tensor rank t holds columns
//     [t*cols/tp, (t+1)*cols/tp) of every row.
// The full model's flat layout is the tensors in the order given, each
// row-major. Partition (p, t), what stage p's tensor rank t holds and trains
// as its own partition job, is stage p's tensors in the same order, each as
// rank t's slice, packed; every tensor rank of a stage has the same shapes.
//
// Create refuses, naming the tensor and the numbers: tp or pp < 1, an empty
// or repeated name, a shape that is not [n] or [rows, cols] with positive
// sizes, kDim1 on a vector, a split size tp does not divide, a stage outside
// [0, pp), and a stage that holds no tensor.
//
// Replicated tensors are computed identically on every tensor rank, so their
// copies stay bitwise equal; Assemble checks that and fails naming the tensor
// otherwise (a model bug: some rank computed it from different data).
//
// Example (a column-parallel layer then a row-parallel one, two stages):
//   auto plan = PartitionPlan::Create({{"fc0.weight", {64, 16}, TensorSplit::kDim0, 0},
//                                      {"fc0.bias", {64}, TensorSplit::kDim0, 0},
//                                      {"fc1.weight", {4, 64}, TensorSplit::kDim1, 1},
//                                      {"fc1.bias", {4}, TensorSplit::kReplicated, 1}},
//                                     /*tp=*/2, /*pp=*/2);
//   plan->partition(1)[0].shape;            // {4, 32}: fc1.weight on each tensor rank
//   auto part = plan->Slice(full, 1, /*t=*/0);
//   worker.RegisterLayout(plan->Layout(1), *part);
//   auto whole = plan->Assemble(parts);     // parts[p * tp + t]
//
// Pure logic: no I/O, no threads. Immutable after Create; const methods may
// run concurrently.
#ifndef TESSEL_CORE_PARTITION_H_
#define TESSEL_CORE_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/layout.h"

namespace tessel {

enum class TensorSplit {
  kReplicated,  // whole on every tensor rank
  kDim0,        // rows (column-parallel weight, its bias)
  kDim1,        // columns (row-parallel weight)
};
// "replicated", "split along dim 0", "split along dim 1".
const char* TensorSplitName(TensorSplit split);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // [rows, cols] or [n]
  TensorSplit split = TensorSplit::kReplicated;
  int stage = 0;
};

// A tensor as a partition holds it.
struct PartitionEntry {
  int tensor = 0;  // index into PartitionPlan::tensors()
  std::string name;
  std::vector<int64_t> shape;  // the tensor rank's slice
  size_t offset = 0;           // in the partition's flat layout
  size_t numel = 0;
};

// Elements [full_offset, full_offset + count) of the full layout are
// [part_offset, part_offset + count) of a partition.
struct CopyRun {
  size_t full_offset = 0;
  size_t part_offset = 0;
  size_t count = 0;
};

class PartitionPlan {
 public:
  static absl::StatusOr<PartitionPlan> Create(std::vector<TensorSpec> tensors, int tp, int pp);

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // Index of the tensor called `name`, -1 if none.
  int Find(absl::string_view name) const;

  // The full model's flat layout.
  size_t full_size() const { return full_size_; }
  size_t full_offset(int tensor) const { return full_offsets_[tensor]; }
  size_t full_numel(int tensor) const;

  // Stage p's partition (the same shapes and offsets for every tensor rank).
  const std::vector<PartitionEntry>& partition(int stage) const { return stages_[stage].entries; }
  size_t partition_size(int stage) const { return stages_[stage].size; }
  // `tensor` within its stage's partition.
  const PartitionEntry& entry(int tensor) const;
  // What Worker::RegisterLayout takes for stage p's partition.
  std::vector<TensorDesc> Layout(int stage) const;

  // The contiguous runs of `tensor` that tensor rank t holds, in order.
  std::vector<CopyRun> Runs(int tensor, int t) const;

  // Partition (stage, t) of a full vector of full_size() floats.
  absl::StatusOr<std::vector<float>> Slice(absl::Span<const float> full, int stage, int t) const;
  // The full vector from every partition, parts[stage * tp + t]. Fails if a
  // count or size is wrong, or a replicated tensor differs between tensor
  // ranks (naming the tensor, its stage, the ranks and the first differing
  // element).
  absl::StatusOr<std::vector<float>> Assemble(const std::vector<std::vector<float>>& parts) const;

 private:
  struct Stage {
    std::vector<PartitionEntry> entries;
    size_t size = 0;
  };
  PartitionPlan(std::vector<TensorSpec> tensors, int tp, int pp);

  std::vector<TensorSpec> tensors_;
  int tp_ = 1;
  int pp_ = 1;
  std::vector<size_t> full_offsets_;
  size_t full_size_ = 0;
  std::vector<Stage> stages_;
  std::vector<int> entry_index_;  // per tensor: its index in its stage's entries
};

}  // namespace tessel

#endif  // TESSEL_CORE_PARTITION_H_
