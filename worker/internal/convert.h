// The SDK's plain option types to and from the protocol's (proto/shard.proto).
//
// Contract: every Strategy and Precision has its own proto value;
// MakeJobSpec carries the job's options (strategy, precision of every
// tensor, bucket size, alignment, top-k, checkpoint policy, fsdp units), so
// the servers' ValidateJobSpec lays the job out as the worker's options say.
//
// Threads: none (pure).
//
// Example:
//   v1::JobSpec spec = MakeJobSpec(options, world_size, {{"w", {1024}}}, num_shards);
//   TESSEL_ASSIGN_OR_RETURN(Layout layout, ValidateJobSpec(spec));
#ifndef TESSEL_WORKER_INTERNAL_CONVERT_H_
#define TESSEL_WORKER_INTERNAL_CONVERT_H_

#include <vector>

#include "core/layout.h"
#include "proto/shard.pb.h"
#include "worker/options.h"

namespace tessel::internal {

v1::Strategy ToProto(Strategy strategy);
v1::DType ToProto(Precision precision);
v1::CheckpointPolicy ToProto(const CheckpointPolicy& policy);
// The job spec a worker registers: its options, the job's world size now
// (options.world_size at Connect; a newcomer's is the running job's) and the
// model's tensors.
v1::JobSpec MakeJobSpec(const WorkerOptions& options, int world_size,
                        const std::vector<TensorDesc>& tensors, int num_shards);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_CONVERT_H_
