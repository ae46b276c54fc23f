// Replaying fixed gradients through a hybrid (data x tensor x pipeline) MLP
// job: the files tessel-replay --strategy=hybrid and tessel-hybrid-train
// --grads read, and how they are checked.
//
// Contract: the flat vector is the MLP's parameter vector in model::Mlp's
// layout (the sizes --layers gives); INIT holds exactly that many floats.
// There are dp data-parallel replicas. Replica d's gradient of step k is
//   DIR/step{k}_rank{d}.npy                       with one micro-batch, or
//   DIR/step{k}_rank{d}_micro{m}.npy, m in [0, M) with M > 1 micro-batches,
// whose mean (summed in micro-batch order, then divided by M) is the
// replica's step gradient. Every file is a 1-D float32 .npy of the same
// length as INIT. Process (d, p, t) steps partition (p, t) with its slice
// (model::SplitMlp::Slice; tensors TP replicates are in every tensor rank's
// slice). Because every optimizer is elementwise, the reassembled result
// equals flat single-process training on the same files, bit for bit.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::vector<float> init,  // nothing started yet
//                           ValidateHybridReplayInputs(init_path, dir, split.model(), dp, m,
//                           steps));
//   std::vector<float> part = split.Slice(init, p, t);
#ifndef TESSEL_TOOLS_INTERNAL_HYBRID_REPLAY_H_
#define TESSEL_TOOLS_INTERNAL_HYBRID_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/mlp.h"

namespace tessel {

// The gradient file of (step, replica, micro) as laid out above.
std::string HybridReplayGradPath(const std::string& dir, int64_t step, int replica, int micro,
                                 int micro_batches);

// Reads one gradient file and checks it holds `num_params` floats; errors
// name the file.
absl::StatusOr<std::vector<float>> ReadHybridReplayGrad(const std::string& path, size_t num_params);

// Reads INIT (it must hold model.num_params() floats) and checks every
// gradient file of steps [0, steps), replicas [first_replica, end_replica)
// (all dp replicas when end_replica < 0) and micro-batches [0, M): present,
// readable, of the right length. Returns INIT. Every error names the file
// and what to change.
absl::StatusOr<std::vector<float>> ValidateHybridReplayInputs(
    const std::string& init_path, const std::string& dir, const model::Mlp& model, int dp,
    int micro_batches, int64_t steps, int first_replica = 0, int end_replica = -1);

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_HYBRID_REPLAY_H_
