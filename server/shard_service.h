// gRPC adapter for the shard server's control plane (tessel.v1.ShardServer).
// Handlers translate between protos and JobTable/ShardJob/Checkpointer, and
// enforce the admin token; no other logic here.
//
// Authorization: when the server has an admin token, every RPC that changes
// state (CreateJob, SetEpoch, DeleteJob, SaveCheckpoint, DeleteCheckpoint)
// needs metadata `authorization: Bearer <token>`; read-only RPCs need it too
// unless `allow_anonymous_reads`. Refusals are UNAUTHENTICATED (no token) or
// PERMISSION_DENIED (wrong token); the check is rpc/auth.h's, shared with
// the registry.
#ifndef TESSEL_SERVER_SHARD_SERVICE_H_
#define TESSEL_SERVER_SHARD_SERVICE_H_

#include <string>

#include "proto/shard.grpc.pb.h"
#include "rpc/auth.h"
#include "server/job_table.h"
#include "transport/transport.h"

namespace tessel {

struct ShardServiceOptions {
  int shard_index = 0;
  std::string pool;
  std::string admin_token;  // "" = no authorization
  bool allow_anonymous_reads = true;
};

class ShardService final : public v1::ShardServer::Service {
 public:
  // `jobs` and `transport` (whose address GetServerInfo reports) are not
  // owned and must outlive the service.
  ShardService(JobTable* jobs, const Transport* transport, ShardServiceOptions options)
      : jobs_(jobs),
        transport_(transport),
        options_(std::move(options)),
        auth_({options_.admin_token, options_.allow_anonymous_reads}, "this shard server") {}

  grpc::Status CreateJob(grpc::ServerContext*, const v1::CreateJobRequest*,
                         v1::CreateJobResponse*) override;
  grpc::Status SetEpoch(grpc::ServerContext*, const v1::SetEpochRequest*,
                        v1::SetEpochResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const v1::JobRef*, v1::ShardStats*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::JobRef*, v1::DeleteJobResponse*) override;
  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                             v1::ServerInfoResponse*) override;
  grpc::Status SaveCheckpoint(grpc::ServerContext*, const v1::SaveCheckpointRequest*,
                              v1::SaveCheckpointResponse*) override;
  grpc::Status ListCheckpoints(grpc::ServerContext*, const v1::JobRef*,
                               v1::ListCheckpointsResponse*) override;
  grpc::Status GetCheckpoint(grpc::ServerContext*, const v1::CheckpointRef*,
                             v1::CheckpointInfo*) override;
  grpc::Status VerifyCheckpoint(grpc::ServerContext*, const v1::CheckpointRef*,
                                v1::VerifyCheckpointResponse*) override;
  grpc::Status DeleteCheckpoint(grpc::ServerContext*, const v1::CheckpointRef*,
                                v1::DeleteCheckpointResponse*) override;
  grpc::Status ReadState(grpc::ServerContext*, const v1::ReadStateRequest*,
                         v1::ShardState*) override;
  grpc::Status WriteState(grpc::ServerContext*, const v1::WriteStateRequest*,
                          v1::WriteStateResponse*) override;

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx, bool mutating) const;
  v1::ShardStats StatsOf(ShardJob& job);

  JobTable* const jobs_;
  const Transport* const transport_;
  const ShardServiceOptions options_;
  const AdminAuth auth_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_SERVICE_H_
