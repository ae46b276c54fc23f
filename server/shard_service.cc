#include "server/shard_service.h"

#include "absl/strings/str_cat.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {
constexpr char kVersion[] = "tessel 0.1.0 (wire v1)";

grpc::Status NoJob(const std::string& job) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("no job '", job, "' on this shard server"));
}
}  // namespace

grpc::Status ShardService::CreateJob(grpc::ServerContext*, const v1::CreateJobRequest* req,
                                     v1::CreateJobResponse* resp) {
  if (req->shard_index() != shard_index_) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("this server is shard ", shard_index_,
                                     " of its pool; CreateJob asked for shard ",
                                     req->shard_index()));
  }
  auto r = plane_->CreateJob(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = *r;
  return grpc::Status::OK;
}

grpc::Status ShardService::SetEpoch(grpc::ServerContext*, const v1::SetEpochRequest* req,
                                    v1::SetEpochResponse* resp) {
  auto job = plane_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  absl::Status s = job->SetEpoch(req->epoch());
  resp->set_epoch(job->epoch());
  return ToGrpc(s);
}

grpc::Status ShardService::GetStats(grpc::ServerContext*, const v1::JobRef* req,
                                    v1::ShardStats* resp) {
  auto job = plane_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  *resp = job->Stats();
  return grpc::Status::OK;
}

grpc::Status ShardService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                                    v1::ListJobsResponse* resp) {
  for (auto& job : plane_->Jobs()) *resp->add_jobs() = job->Stats();
  return grpc::Status::OK;
}

grpc::Status ShardService::DeleteJob(grpc::ServerContext*, const v1::JobRef* req,
                                     v1::DeleteJobResponse*) {
  return ToGrpc(plane_->DeleteJob(req->job()));
}

grpc::Status ShardService::GetServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                                         v1::ServerInfoResponse* resp) {
  resp->set_version(kVersion);
  resp->set_ucx_address(ucx_address_);
  resp->set_shard_index(shard_index_);
  resp->set_pool(pool_);
  return grpc::Status::OK;
}

}  // namespace tessel
