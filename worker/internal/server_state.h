// Reading and writing the training state the shard servers hold
// (ReadState/WriteState RPCs, in chunks of rpc/limits.h's
// kMaxStateElementsPerCall, epoch-fenced), for Serialize/Deserialize and for
// moving DDP servers to a step.
//
// Contract: ReadServerState fills state->params and state->state (sized by
// the caller) for every shard's range at ctx.step; a chunk of the wrong size
// is DataLoss. WriteServerState stages each shard's chunks and commits them
// together (DDP servers hold no state: only the step is written). Shards
// without elements take no part in the steps (core/layout.h): neither reads
// nor writes them.
//
// Threads: the driving thread.
//
// Example:
//   TrainState state;
//   state.params.assign(layout.num_params(), 0.f);
//   state.state.assign(StateSlots(options.optimizer), std::vector<float>(layout.num_params()));
//   TESSEL_RETURN_IF_ERROR(ReadServerState(ctx, fleet, &state));  // at ctx.step
//   TESSEL_RETURN_IF_ERROR(WriteServerState(ctx, fleet, state));  // at state.step
#ifndef TESSEL_WORKER_INTERNAL_SERVER_STATE_H_
#define TESSEL_WORKER_INTERNAL_SERVER_STATE_H_

#include "absl/status/status.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/job_context.h"
#include "worker/train_state.h"

namespace tessel::internal {

absl::Status ReadServerState(const JobContext& ctx, const ShardFleet& fleet, TrainState* state);
absl::Status WriteServerState(const JobContext& ctx, const ShardFleet& fleet,
                              const TrainState& state);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_SERVER_STATE_H_
