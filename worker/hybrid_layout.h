// The layout of a hybrid data x tensor x pipeline parallel job, as plain
// arithmetic every process computes alike: the configuration's checks, the
// mapping between global ranks and (d, p, t) coordinates, the groups a rank
// talks to, the tags of worker-to-worker messages and a pipeline stage's
// 1F1B schedule. No I/O, no threads; HybridSession (worker/hybrid.h) and the
// stage code (worker/pipeline_stage.h, tools/internal/hybrid_mlp.h) build on it.
//
// Global rank r of dp * tp * pp processes:
//   r = d * (pp * tp) + p * tp + t,   i.e.  t = r % tp, p = (r / tp) % pp,
//                                           d = r / (tp * pp),
// with d the data-parallel replica, p the pipeline stage and t the tensor
// rank: tensor-parallel peers (which talk most) have adjacent ranks.
//
// Example:
//   const HybridConfig c{.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4};
//   TESSEL_RETURN_IF_ERROR(ValidateHybridConfig(c, /*world_size=*/8));
//   const RankCoords me = CoordsOf(c, rank);              // rank 5: d1 p0 t1
//   const int next = NextStageRank(c, rank);               // -1 on the last stage
//   for (const PipelineOp& op : OneFOneBSchedule(me.p, c.pp, c.micro_batches)) {
//     const uint64_t tag = HybridTag(HybridMessage::kActivation, step, op.micro_batch, me.p);
//     ...
//   }
#ifndef TESSEL_WORKER_HYBRID_LAYOUT_H_
#define TESSEL_WORKER_HYBRID_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tessel {

struct HybridConfig {
  int dp = 1;  // data-parallel replicas
  int tp = 1;  // tensor-parallel ranks per stage
  int pp = 1;  // pipeline stages
  int micro_batches = 1;
  int world() const { return dp * tp * pp; }
};

// Limits of the tag encoding (HybridTag).
inline constexpr int kMaxMicroBatches = 4095;
inline constexpr int64_t kMaxHybridSteps = int64_t{1} << 32;

// Refuses, naming the flag or field to change: dp/tp/pp < 1,
// dp * tp * pp != world_size (the number of processes), micro_batches
// outside [1, kMaxMicroBatches].
absl::Status ValidateHybridConfig(const HybridConfig& config, int world_size);

struct RankCoords {
  int d = 0;  // data-parallel replica
  int p = 0;  // pipeline stage
  int t = 0;  // tensor rank
};
RankCoords CoordsOf(const HybridConfig& config, int rank);
int RankOf(const HybridConfig& config, const RankCoords& c);
// "rank 5 (d1 p0 t1)".
std::string DescribeRank(const HybridConfig& config, int rank);

// Global ranks of rank's tensor-parallel group ((d, p, 0..tp-1), ascending)
// and of its data-parallel group ((0..dp-1, p, t)).
std::vector<int> TensorGroup(const HybridConfig& config, int rank);
std::vector<int> DataGroup(const HybridConfig& config, int rank);
// The rank with the same (d, t) one stage later / earlier; -1 at the ends.
int NextStageRank(const HybridConfig& config, int rank);
int PrevStageRank(const HybridConfig& config, int rank);

// What a worker-to-worker message carries. Part of the tag.
enum class HybridMessage : uint8_t {
  kActivation = 1,      // stage p -> p+1: output of stage p for a micro-batch
  kActivationGrad = 2,  // stage p+1 -> p: gradient w.r.t. that output
  kForwardSum = 3,      // tensor-parallel sum of a row-parallel layer's output
  kBackwardSum = 4,     // tensor-parallel sum of a column-parallel layer's input gradient
  kCollect = 5,         // final parameters of a partition, to rank 0
  kBarrier = 6,
  kConfig = 7,    // configuration check at start-up
  kLoss = 8,      // data-parallel sum of the loss, for logging
  kRecovery = 9,  // HybridSession::Recover: barrier, checkpoint lists, the chosen step
  kGather = 10,   // tensor-parallel all-gathers (tessel.torch.parallel: outputs, to_dense)
};

// Tag layout (64 bits): kind (8) | step (32) | micro-batch (12) | index (12),
// index = layer for sums, stage boundary for activations, partition for
// collection. Unique per (sender, receiver) for everything in flight.
uint64_t HybridTag(HybridMessage kind, int64_t step, int micro_batch, int index);

// One slot of a pipeline stage's schedule.
struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
  friend bool operator==(const PipelineOp& a, const PipelineOp& b) {
    return a.forward == b.forward && a.micro_batch == b.micro_batch;
  }
};

// The 1F1B (one-forward-one-backward, "PipeDream-flush") schedule of
// `stage` out of `stages` over `micro_batches`: warm-up forwards
// w = min(stages - 1 - stage, micro_batches), then alternating one forward,
// one backward until every forward is done, then the remaining backwards.
// Backwards run in micro-batch order 0, 1, ..., so gradients accumulate in
// that order; at most w + 1 micro-batches' activations are held at once.
std::vector<PipelineOp> OneFOneBSchedule(int stage, int stages, int micro_batches);

}  // namespace tessel

#endif  // TESSEL_WORKER_HYBRID_LAYOUT_H_
