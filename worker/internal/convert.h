// The SDK's plain option types to and from the protocol's (proto/shard.proto).
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
