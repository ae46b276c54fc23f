// gRPC adapter for the shard server's control plane (tessel.v1.ShardServer).
// Handlers translate between protos and DataPlane/ShardJob; no logic here.
#ifndef TESSEL_SERVER_SHARD_SERVICE_H_
#define TESSEL_SERVER_SHARD_SERVICE_H_

#include <string>

#include "proto/shard.grpc.pb.h"
#include "server/data_plane.h"

namespace tessel {

class ShardService final : public v1::ShardServer::Service {
 public:
  ShardService(DataPlane* plane, std::string ucx_address, int shard_index, std::string pool)
      : plane_(plane),
        ucx_address_(std::move(ucx_address)),
        shard_index_(shard_index),
        pool_(std::move(pool)) {}

  grpc::Status CreateJob(grpc::ServerContext*, const v1::CreateJobRequest*,
                         v1::CreateJobResponse*) override;
  grpc::Status SetEpoch(grpc::ServerContext*, const v1::SetEpochRequest*,
                        v1::SetEpochResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const v1::JobRef*, v1::ShardStats*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::JobRef*,
                         v1::DeleteJobResponse*) override;
  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                             v1::ServerInfoResponse*) override;

 private:
  DataPlane* const plane_;
  const std::string ucx_address_;
  const int shard_index_;
  const std::string pool_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_SERVICE_H_
