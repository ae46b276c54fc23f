// SplitMlp: the demo MLP (model/mlp.h) cut for tensor and pipeline
// parallelism, and the single-process arithmetic every hybrid run must
// reproduce bit for bit.
//
// Tensor parallelism (tp ranks), Megatron-style, on pairs of layers: layers
// (0, 1), (2, 3), ... form column/row pairs.
//   - column-parallel layer A (even index): its weight's rows (outputs) are
//     split over the tp ranks: rank t holds rows [t*h/tp, (t+1)*h/tp) of the
//     weight and bias and computes that slice of the output (ReLU is
//     elementwise, so it stays local);
//   - row-parallel layer B (the next one): its weight's columns (inputs) are
//     split the same way; rank t multiplies its slice of A's output by its
//     column slice, and the partial outputs are summed over the tp group in
//     rank order: out = p_0 + p_1 + ... + p_{tp-1}, where only rank 0 starts
//     its partial from the bias (p_0 = b + x_0 W_0^T, p_t = x_t W_t^T).
//     B's bias is replicated on every tp rank.
//   - with an odd number of layers the last layer has no partner: it is
//     replicated (every tp rank holds it and computes it identically).
// Backward mirrors this: B's input gradient is local to each rank (its slice
// of A's output), and A's input gradient is a sum of per-rank partials, again
// in rank order. Replicated tensors get the same gradient on every tp rank
// (computed from identical data), so their copies stay bitwise equal.
// tp must divide every hidden size that is split (the output size of each
// column-parallel layer).
//
// Pipeline parallelism (pp stages): stage p holds layers
// [p*L/pp, (p+1)*L/pp) of the L layers (pp <= L). A column/row pair may
// straddle two stages: the activation between them is split, and tensor rank t
// of one stage talks only to tensor rank t of the next.
//
// Partition (stage p, tensor rank t): the tensors of the stage's layers on
// rank t, packed in order (weight then bias per layer), named as in the full
// model ("fc1.weight", ...) with their local shapes. Every tp rank of a stage
// has the same shapes. The cut is a generic PartitionPlan (core/partition.h,
// plan()): a column-parallel layer's weight and bias split along dim 0, a
// row-parallel layer's weight along dim 1 and its bias replicated, a
// replicated layer's both replicated; Slice cuts a full parameter vector
// (Mlp's layout) into a partition and Assemble puts all partitions back
// together through it.
//
// Micro-batches: a replica's batch of B rows is cut into M micro-batches of
// B/M consecutive rows; micro-batch j's loss is its own mean, and a step's
// gradient is (g_0 + g_1 + ... + g_{M-1}) / M summed in micro-batch order: the
// mean over the replica's batch.
//
// ReferenceGradients computes, in one process and in this order, exactly what
// a hybrid run's (stage, tensor rank) processes compute together for one data
// replica. With tp = 1 and M = 1 it equals Mlp::LossAndGrad bit for bit.
//
// Example:
//   auto split = SplitMlp::Create({16, 32, 32, 4}, /*tp=*/2, /*pp=*/2);
//   std::vector<float> full(split->model().num_params());
//   split->model().Init(full.data(), seed);
//   std::vector<float> part = split->Slice(full, /*stage=*/1, /*t=*/0);
//
// Thread safety: immutable after Create; const methods may run concurrently.
#ifndef TESSEL_MODEL_SPLIT_MLP_H_
#define TESSEL_MODEL_SPLIT_MLP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/partition.h"
#include "model/mlp.h"

namespace tessel::model {

enum class LayerSplit { kColumn, kRow, kReplicated };
const char* LayerSplitName(LayerSplit split);

class SplitMlp {
 public:
  // Refuses, naming what to change: invalid sizes, tp < 1, pp < 1,
  // pp > number of layers, tp > 1 with a single layer, tp not dividing a
  // split hidden size.
  static absl::StatusOr<SplitMlp> Create(std::vector<int> sizes, int tp, int pp);

  // The unsplit model: the layout of a reassembled parameter vector.
  const Mlp& model() const { return model_; }
  const std::vector<int>& sizes() const { return model_.sizes(); }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int num_layers() const { return model_.num_layers(); }
  // The generic description of the cut: Mlp's tensors, in its order.
  const PartitionPlan& plan() const { return plan_; }

  LayerSplit split(int layer) const { return layers_[layer].split; }
  // Whether `layer`'s weight (or bias) is held whole by every tensor rank:
  // replicated layers, and the bias of a row-parallel layer.
  bool replicated(int layer, bool is_bias) const;
  // Layers [stage_begin, stage_end) belong to `stage`.
  int stage_begin(int stage) const { return stage_first_[stage]; }
  int stage_end(int stage) const { return stage_first_[stage + 1]; }
  int stage_of(int layer) const { return layers_[layer].stage; }
  // Input and output widths of `layer` on one tensor rank.
  int local_in(int layer) const { return layers_[layer].local_in; }
  int local_out(int layer) const { return layers_[layer].local_out; }
  // Width (per row) of a stage's input and output activations on one tensor
  // rank: what crosses each pipeline boundary.
  int stage_in(int stage) const;
  int stage_out(int stage) const { return local_out(stage_end(stage) - 1); }

  // The partition of `stage` (the same shapes for every tensor rank).
  const std::vector<TensorInfo>& partition_tensors(int stage) const {
    return partitions_[stage].tensors;
  }
  size_t partition_size(int stage) const { return partitions_[stage].size; }
  // `layer`'s weight and bias within its stage's partition.
  const TensorInfo& weight(int layer) const;
  const TensorInfo& bias(int layer) const;

  // Partition (stage, t) of a full parameter vector (num_params floats).
  std::vector<float> Slice(const std::vector<float>& full, int stage, int t) const;
  // The full vector from every partition, parts[stage * tp + t]. Fails if a
  // size is wrong or a replicated tensor differs between tensor ranks (naming
  // the tensor, the ranks and the first differing element).
  absl::StatusOr<std::vector<float>> Assemble(const std::vector<std::vector<float>>& parts) const;

  // One data replica's step gradient, computed in one process with the
  // arithmetic described above: parts[stage * tp + t] are the partitions'
  // parameters; x [batch, inputs] and y [batch] the replica's batch; grads
  // gets one vector per partition (resized), holding the mean over the batch.
  // Returns the mean loss ((l_0 + ... + l_{M-1}) / M). Requires
  // batch % micro_batches == 0 (aborts otherwise: validate first).
  float ReferenceGradients(const std::vector<std::vector<float>>& parts, const float* x,
                           const int32_t* y, int batch, int micro_batches,
                           std::vector<std::vector<float>>* grads) const;

 private:
  struct LayerPlan {
    LayerSplit split = LayerSplit::kReplicated;
    int stage = 0;
    int local_in = 0;
    int local_out = 0;
    size_t weight_index = 0;  // into its stage's partition tensors
  };
  struct Partition {
    std::vector<TensorInfo> tensors;
    size_t size = 0;
  };

  SplitMlp(Mlp model, int tp, int pp, PartitionPlan plan);
  // One micro-batch of ReferenceGradients; grads are overwritten.
  float ReferenceMicroBatch(const std::vector<std::vector<float>>& parts, const float* x,
                            const int32_t* y, int rows,
                            std::vector<std::vector<float>>* grads) const;

  Mlp model_;
  int tp_ = 1;
  int pp_ = 1;
  PartitionPlan plan_;
  std::vector<LayerPlan> layers_;
  std::vector<int> stage_first_;  // pp + 1 entries
  std::vector<Partition> partitions_;
};

}  // namespace tessel::model

#endif  // TESSEL_MODEL_SPLIT_MLP_H_
