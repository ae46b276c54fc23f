// PipelineStage: one rank's pipeline stage of a hybrid job (worker/hybrid.h)
// driven through a training step, with every worker-to-worker message of the
// pipeline and of tensor parallelism built here, not in the model.
//
// Step(step, functions) runs OneFOneBSchedule(p, pp, micro_batches) and, for
// each slot:
//   forward j:  receives the input activation of micro-batch j from the same
//               tensor rank of stage p-1 (stage 0 gets an empty vector: it
//               reads its own data), calls forward(j, input), and sends what
//               it returns to stage p+1. On the last stage forward computes
//               the loss and returns d(loss)/d(its output) instead, which
//               the driver keeps for backward j.
//   backward j: receives d(loss)/d(output) of micro-batch j from stage p+1
//               (the last stage: what its forward returned), calls
//               backward(j, output_grad), and sends what it returns,
//               d(loss)/d(input), to stage p-1 (stage 0's is dropped: it may
//               return {}).
// Messages are tagged HybridTag(kActivation / kActivationGrad, step, j,
// boundary); every wait names the step, micro-batch, stage and peer, and
// times out after the PeerGroup's deadline. With input_size / output_size
// set, a message or a callback's result of another length is refused,
// naming it.
//
// Tensor parallelism: SumOverTensorGroup sums a vector over the stage's
// tensor-parallel group, (d, p, 0..tp-1), in fixed rank order
// (collectives.h's AllReduceSum): every member gets the same bits. Its tag is
// (kForwardSum or kBackwardSum, step, micro-batch, index); call it with the
// same arguments, in the same order, on every tensor rank. `index` (e.g. the
// layer) tells apart the sums of one micro-batch, in [0, 4095].
//
// Backward runs in micro-batch order 0, 1, ..., so a model that accumulates
// its gradients as it goes sums them in that order.
//
// Threads: Step and SumOverTensorGroup run on the caller's thread; the
// callbacks are called on it.
//
// Example (a column-parallel layer on stage 0, a row-parallel one on stage 1):
//   PipelineStage stage(&session->peers(), session->config(), session->rank());
//   StageFunctions f;
//   f.input_size = rows * hidden / tp;  // per micro-batch, at the stage's input
//   f.forward = [&](int j, std::vector<float> in) -> absl::StatusOr<std::vector<float>> {
//     std::vector<float> partial = ...;  // this rank's share of fc1's output
//     TESSEL_RETURN_IF_ERROR(stage.SumOverTensorGroup(TensorSum::kForward, step, j, 1,
//                                                     absl::MakeSpan(partial), "fc1's output"));
//     return LossGradient(partial, j);   // last stage: d(loss)/d(output)
//   };
//   f.backward = [&](int j, std::vector<float> d) { ...; return d_input; };
//   TESSEL_RETURN_IF_ERROR(stage.Step(step, f));
#ifndef TESSEL_WORKER_PIPELINE_STAGE_H_
#define TESSEL_WORKER_PIPELINE_STAGE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/partition.h"
#include "worker/hybrid.h"
#include "worker/peer_group.h"

namespace tessel {

struct StageFunctions {
  // forward(micro_batch, input activation) -> output activation (last stage:
  // d(loss)/d(output)).
  std::function<absl::StatusOr<std::vector<float>>(int, std::vector<float>)> forward;
  // backward(micro_batch, d(loss)/d(output)) -> d(loss)/d(input).
  std::function<absl::StatusOr<std::vector<float>>(int, std::vector<float>)> backward;
  // Floats per micro-batch at the stage's input and output (-1: unchecked).
  int64_t input_size = -1;
  int64_t output_size = -1;
};

enum class TensorSum {
  kForward,   // e.g. a row-parallel layer's partial outputs
  kBackward,  // e.g. a column-parallel layer's partial input gradients
};

class PipelineStage {
 public:
  // `peers` is the job's mesh (this process is `rank`); it must outlive the
  // stage. (A HybridSession's peers(), config() and rank().)
  PipelineStage(PeerGroup* peers, const HybridConfig& config, int rank);

  const HybridConfig& config() const { return config_; }
  const RankCoords& coords() const { return coords_; }
  bool first_stage() const { return coords_.p == 0; }
  bool last_stage() const { return coords_.p + 1 == config_.pp; }

  // One training step's forwards and backwards of every micro-batch, in 1F1B
  // order. Returns the first failure (of a callback or a message).
  absl::Status Step(int64_t step, const StageFunctions& functions);

  // data <- the sum over this stage's tensor group, in rank order. `what`
  // names the vector in errors, e.g. "fc1's output".
  absl::Status SumOverTensorGroup(TensorSum kind, int64_t step, int micro_batch, int index,
                                  absl::Span<float> data, absl::string_view what);

 private:
  absl::Status Forward(int j, const StageFunctions& f);
  absl::Status Backward(int j, const StageFunctions& f);
  std::string Where(int j) const;
  absl::Status CheckSize(const std::vector<float>& v, int64_t expected, int j,
                         absl::string_view what) const;

  PeerGroup* const peers_;
  const HybridConfig config_;
  const int rank_;
  const RankCoords coords_;
  const std::vector<int> tensor_group_;
  const int prev_;  // the previous / next stage's rank, -1 at the ends
  const int next_;

  // Per Step() call.
  int64_t step_ = 0;
  std::vector<std::vector<float>> loss_grads_;  // last stage: forward j's result
};

// After the last step (collective over the partitions' replica 0): every
// process (0, p, t) passes `mine`, its partition's final parameters (e.g.
// Worker::GatherAll()), and sends it to rank 0, which assembles all of them
// with `plan` (checking that replicated tensors agree) and gets the full
// vector. Everyone else gets an empty vector; processes with d > 0 send
// nothing (pass {}). `step` tells this collection apart from another one
// (e.g. the number of steps run).
absl::StatusOr<std::vector<float>> CollectPartitions(PeerGroup& peers, const HybridConfig& config,
                                                     int rank, const PartitionPlan& plan,
                                                     std::vector<float> mine, int64_t step);

}  // namespace tessel

#endif  // TESSEL_WORKER_PIPELINE_STAGE_H_
