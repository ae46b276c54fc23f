// The ShardServer service's conversions between ShardJob's plain C++ types
// and the tessel.v1 messages: ReadState/WriteState requests and answers, and
// ShardStats. The adapter's half of the job; ShardService calls these and
// nothing else converts a job's state to protos.
//
// Contract: ReadShardState answers exactly what ShardJob::ReadState sees
// (params, then the state slots one after another, as raw little-endian
// floats), or its error; WriteShardState passes the chunk and commit through
// to ShardJob::WriteState; ShardStatsProto is ShardJob::Stats plus the
// spec's fields (job, strategy, world, shards, parameters, range).
//
// Threads: as the ShardJob calls they make (any thread).
//
// Example:
//   absl::StatusOr<v1::ShardState> st = ReadShardState(*job, request);
//   v1::ShardStats stats = ShardStatsProto(*job);
#ifndef TESSEL_SERVER_SHARD_JOB_PROTO_H_
#define TESSEL_SERVER_SHARD_JOB_PROTO_H_

#include "absl/status/statusor.h"
#include "proto/shard.pb.h"
#include "server/shard_job.h"

namespace tessel {

absl::StatusOr<v1::ShardState> ReadShardState(ShardJob& job, const v1::ReadStateRequest& req);
absl::StatusOr<v1::WriteStateResponse> WriteShardState(ShardJob& job,
                                                       const v1::WriteStateRequest& req);
// `with_digest`: see ShardJob::Stats.
v1::ShardStats ShardStatsProto(ShardJob& job, bool with_digest = true);

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_JOB_PROTO_H_
