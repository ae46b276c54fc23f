// The demo MLP trained with hybrid data x tensor x pipeline parallelism:
// what one process computes per step (HybridMlpStage), the single-process
// reference it must equal bit for bit (TrainHybridReference), and the flags
// of the worker process tessel-hybrid-train.
//
// HybridMlpStage runs this rank's pipeline stage of model::SplitMlp over the
// replica's micro-batches through worker/pipeline_stage.h's PipelineStage,
// which does the 1F1B order and every message: a forward gets the stage's
// input activation (stage 0 reads its rows of the batch), runs the stage's
// layers (row-parallel layers sum their partial outputs over the
// tensor-parallel group) and returns the output (the last stage computes the
// loss and returns its gradient); a backward gets the gradient of that
// output, runs the layers backward (column-parallel layers sum their
// input-gradient partials over the tensor-parallel group) and returns the
// input gradient. Gradients of
// micro-batch 0 are written straight into `grads`, later ones added in
// micro-batch order, and the sum divided by the number of micro-batches when
// the last backward of a layer is done; that layer's tensors are then
// handed to `on_ready` (e.g. Worker::GradientsReady, so pushes overlap the
// rest of backward).
//
// Every wait names the step, micro-batch, stage or layer and the peer it is
// for, and times out after the PeerGroup's deadline.
//
// Example (inside tessel-hybrid-train):
//   HybridMlpStage stage(split, config, rank, &session->peers());
//   for (int64_t k = 0; k < steps; ++k) {
//     model::Dataset b = job.Batch(k, coords.d, config.dp);
//     auto loss = stage.Step(k, worker.params(), b.x.data(), b.y.data(), batch,
//                            worker.grads(), ready);
//     RETURN_IF_ERROR(worker.Step());
//   }
// (With mixed precision the caller passes fp32 buffers instead: the half
// parameters widened to float, and gradients it rounds to half in `ready`;
// see tools/hybrid_main.cc.)
#ifndef TESSEL_TOOLS_INTERNAL_HYBRID_MLP_H_
#define TESSEL_TOOLS_INTERNAL_HYBRID_MLP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "model/split_mlp.h"
#include "tools/internal/mlp_job.h"
#include "worker/hybrid.h"
#include "worker/peer_group.h"
#include "worker/pipeline_stage.h"

ABSL_DECLARE_FLAG(int, dp);
ABSL_DECLARE_FLAG(int, tp);
ABSL_DECLARE_FLAG(int, pp);
// --micro_batches is tools/train_flags.h's (the same meaning: each replica's
// batch is cut into that many equal micro-batches, their mean is pushed).

namespace tessel {

// --dp --tp --pp and --micro_batches, unchecked (see ValidateHybrid).
HybridConfig HybridConfigFromFlags();

// Everything a hybrid MLP run must refuse before starting, with a message
// naming the flag to change: ValidateHybridConfig (dp*tp*pp != world_size,
// micro_batches < 1), model::SplitMlp::Create (tp not dividing a split hidden
// size, pp greater than the number of layers), and a batch that the
// micro-batches do not divide. Returns the split model.
absl::StatusOr<model::SplitMlp> ValidateHybrid(const HybridConfig& config, int world_size,
                                               const MlpJobConfig& mlp);

class HybridMlpStage {
 public:
  // `peers` is the job's mesh (rank `rank`); it must outlive the stage.
  HybridMlpStage(const model::SplitMlp& split, const HybridConfig& config, int rank,
                 PeerGroup* peers);

  // One training step of this rank's partition. params/grads: the partition
  // (split.partition_size(stage) floats); x [batch, inputs] is read on stage 0
  // only, y [batch] on the last stage only (others may pass nullptr). grads
  // is overwritten with the mean gradient over the batch. on_ready(begin, end)
  // gets each tensor's element range once it is final. Returns the mean loss
  // over the batch on the last stage, 0 on the others.
  absl::StatusOr<float> Step(int64_t step, absl::Span<const float> params, const float* x,
                             const int32_t* y, int batch, absl::Span<float> grads,
                             const std::function<absl::Status(int64_t, int64_t)>& on_ready);

 private:
  struct MicroBatch {
    const float* input = nullptr;                 // the stage's input activation
    std::vector<float> received;                  // owns `input` on stages > 0
    std::vector<std::vector<float>> activations;  // outputs of the stage's layers
  };

  // PipelineStage's callbacks: the stage's layers forward (the last stage
  // returns d(loss)/d(logits)) and backward (returns d(loss)/d(input)).
  absl::StatusOr<std::vector<float>> Forward(int j, std::vector<float> input);
  absl::StatusOr<std::vector<float>> Backward(int j, std::vector<float> d);

  const model::SplitMlp& split_;
  const HybridConfig config_;
  const int rank_;
  PipelineStage pipeline_;  // every message of the step
  const int first_layer_;
  const int end_layer_;

  // Per Step() call.
  int64_t step_ = 0;
  int rows_ = 0;  // per micro-batch
  const float* params_ = nullptr;
  const float* x_ = nullptr;
  const int32_t* y_ = nullptr;
  float* grads_ = nullptr;
  const std::function<absl::Status(int64_t, int64_t)>* on_ready_ = nullptr;
  float loss_sum_ = 0;
  std::vector<MicroBatch> micro_;
  std::vector<float> scratch_grads_;  // a later micro-batch's gradients before they are added
  std::vector<float> scratch_;        // kernels' transposes
};

// Single-process hybrid training with the same arithmetic: per step, each
// replica d's gradient from model::SplitMlp::ReferenceGradients on
// job.Batch(step, d, dp), the mean over replicas in rank order (ReduceMean,
// as the shard servers), and the optimizer per partition (ApplyUpdate).
// Returns the reassembled final parameters (model::Mlp's layout).
// With `half` (mixed precision, what --precision=fp16|bf16 runs): each step
// the partitions compute from their fp32 masters rounded to half, each
// replica's gradients (accumulated in fp32 over the micro-batches) are
// rounded to half, the mean over replicas and the optimizer stay fp32 on the
// masters, and the result is the masters rounded to half.
absl::StatusOr<std::vector<float>> TrainHybridReference(
    const MlpJob& job, const OptimizerParams& optimizer, const HybridConfig& config, int steps,
    std::optional<HalfType> half = std::nullopt);

// Largest relative differences (MaxRelativeDifference) of a hybrid run's
// final parameters from the single-process trainings (all with the same
// precision `half`).
struct HybridReferenceDiffs {
  // TrainHybridReference: the correctness contract (<= 1e-6; 0 expected).
  double hybrid = 0;
  // TrainReference: the unsplit MLP with the same micro-batch accumulation
  // (differs only by the tensor-parallel split sums; 0 when tp = 1), and with
  // each replica's whole batch at once. For information.
  double unsplit_same_micro_batches = 0;
  double unsplit_whole_batch = 0;
  // The same two, normwise: ||a - b||_2 / ||b||_2. (Elementwise relative
  // differences of near-zero parameters grow large over long runs; this
  // says how far the parameters moved apart as a whole.)
  double unsplit_same_micro_batches_norm = 0;
  double unsplit_whole_batch_norm = 0;
};

// ||a - b||_2 / ||b||_2 in double; +inf when sizes differ.
double NormRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);
absl::StatusOr<HybridReferenceDiffs> CompareWithReferences(
    const MlpJob& job, const OptimizerParams& optimizer, const HybridConfig& config, int steps,
    const std::vector<float>& final_params, std::optional<HalfType> half = std::nullopt);

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_HYBRID_MLP_H_
