// gRPC adapter for the shard server's control plane (tessel.v1.ShardServer).
// Handlers translate between protos and JobTable/ShardJob/Checkpointer, and
// check the caller's role; no other logic here.
//
// Authorization: every RPC is checked against rpc/auth.h's role table
// (RoleTable(), service "ShardServer") once the server has any credential
// configured (admin token, worker tokens, certificate roles): an admin may do
// everything; a worker, on its own job(s), CreateJob, SetEpoch,
// SaveCheckpoint, ReadState, WriteState, ReadCheckpoint and the reads;
// readers the reads; reads are anonymous while `allow_anonymous_reads`,
// ReadState and ReadCheckpoint (a model's parameters) never.
// Two decisions the table cannot make are taken here:
//  - Restores (CreateJob with restore): a worker credential may restore the
//    job's latest complete checkpoint (restore_step -1, or that step), which
//    is what the worker SDK's --resume and automatic recovery do, but not an
//    older one: going back is an operator's rewind (tesselctl checkpoint
//    restore --step, admin). Checkpoints completed less than
//    kRecentCheckpointGrace ago do not count as newer, so a recovery that
//    resolved "the latest" just before another checkpoint completed is not
//    refused. A restore that loads nothing is allowed: of a job already here
//    (not replace), or of a job here that stands at that very step, restored
//    from it and not trained since (workers joining an operator's restore
//    with --resume --resume_step).
//  - DeleteJob: a worker may delete the reducer helper jobs its SDK creates
//    ("J~sync<N>.e<E>", IsHelperJob) within its scope; other jobs: admin.
//  - Tenants apart (rpc/caller.h): a worker scoped to J reaches a name
//    derived from J ("J.g1", "J.p0.t0", "J~sync8.e1", "J.mesh") only where
//    nothing of that name exists yet or its own credential created what
//    exists. CreateJob records the caller's identity as the job's creator
//    (ShardJob::creator; a restore keeps the checkpoint's), checkpoints
//    record it in their manifest, and each RPC compares with what it acts
//    on: the live job (SetEpoch, ReadState, WriteState, GetStats, ...), the
//    checkpoint it reads (ListCheckpoints: the latest; GetCheckpoint,
//    VerifyCheckpoint, ReadCheckpoint: the one named), for CreateJob the
//    live job, else the checkpoint it restores, else the latest checkpoint
//    (a fresh job would prune another tenant's checkpoints), and for
//    GetMeshKey the first non-admin caller that asked for the mesh's key.
//  - Rewinds: WriteState of a step older than the job's latest complete
//    checkpoint, into a job past it, needs an admin credential, as a restore
//    of an older checkpoint does (otherwise ReadCheckpoint + WriteState
//    would be that restore). Going back within the steps since the latest
//    checkpoint (tessel.torch's load_state_dict of an earlier state_dict),
//    the same or a later step (a state loaded into a fresh job,
//    LoadParameters, DDP recovery moving servers to the workers' step) stay
//    a worker's. SetEpoch never moves an epoch back, for anyone
//    (ShardJob::SetEpoch).
// ListJobs shows a caller holding only job-scoped worker credentials (when
// anonymous reads are off) just the jobs it reaches.
#ifndef TESSEL_SERVER_SHARD_SERVICE_H_
#define TESSEL_SERVER_SHARD_SERVICE_H_

#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/auth.h"
#include "rpc/registry_client.h"
#include "server/frame_keys.h"
#include "server/job_table.h"
#include "transport/transport.h"

namespace tessel {

struct ShardServiceOptions {
  int shard_index = 0;
  std::string pool;
  AuthOptions auth;      // no credential configured = no authorization
  std::string security;  // GetServerInfo's `security` (SecurityPosture)
};

// Checkpoints that completed less than this long ago do not make an older
// one a rewind for a worker's restore (see the file comment).
inline constexpr absl::Duration kRecentCheckpointGrace = absl::Seconds(10);

class ShardService final : public v1::ShardServer::Service {
 public:
  // `jobs` and `transport` (whose address GetServerInfo reports) are not
  // owned and must outlive the service.
  // `frame_keys` (not owned, may be null: frames are not authenticated)
  // answers GetFrameKey. `registry` (not owned, may be null: no rank is
  // ever handed to a replacement) says, on a conflicting GetFrameKey, which
  // process is a rank's worker now (FrameKeys: handovers).
  ShardService(JobTable* jobs, const Transport* transport, ShardServiceOptions options,
               FrameKeys* frame_keys = nullptr, RegistryClient* registry = nullptr)
      : jobs_(jobs),
        transport_(transport),
        frame_keys_(frame_keys),
        registry_(registry),
        options_(std::move(options)),
        auth_(options_.auth, "this shard server") {}

  grpc::Status CreateJob(grpc::ServerContext*, const v1::CreateJobRequest*,
                         v1::CreateJobResponse*) override;
  grpc::Status SetEpoch(grpc::ServerContext*, const v1::SetEpochRequest*,
                        v1::SetEpochResponse*) override;
  grpc::Status SetOptimizer(grpc::ServerContext*, const v1::SetOptimizerRequest*,
                            v1::SetOptimizerResponse*) override;
  grpc::Status SkipTensors(grpc::ServerContext*, const v1::SkipTensorsRequest*,
                           v1::SkipTensorsResponse*) override;
  grpc::Status GetStats(grpc::ServerContext*, const v1::JobRef*, v1::ShardStats*) override;
  grpc::Status GetFrameKey(grpc::ServerContext*, const v1::FrameKeyRequest*,
                           v1::FrameKeyResponse*) override;
  grpc::Status GetMeshKey(grpc::ServerContext*, const v1::MeshKeyRequest*,
                          v1::FrameKeyResponse*) override;
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
  grpc::Status ReadCheckpoint(grpc::ServerContext*, const v1::ReadCheckpointRequest*,
                              v1::CheckpointParams*) override;
  grpc::Status ReadState(grpc::ServerContext*, const v1::ReadStateRequest*,
                         v1::ShardState*) override;
  grpc::Status WriteState(grpc::ServerContext*, const v1::WriteStateRequest*,
                          v1::WriteStateResponse*) override;

 private:
  // The role table's check of `rpc` on `job`, with the tenants' rule:
  // `creator` (called only where the caller reaches `job` by derivation)
  // says who created what exists of it. `identified`, if not null, receives
  // the caller (anonymous when no credential is configured).
  grpc::Status Authorize(grpc::ServerContext* ctx, absl::string_view rpc,
                         absl::string_view job = "",
                         const std::function<Creator()>& creator = nullptr,
                         Caller* identified = nullptr);
  // Who created what exists of `job` (see the file comment); nullopt for
  // nothing.
  Creator LiveCreator(const std::string& job);
  Creator CheckpointCreator(const std::string& job, int64_t step);  // -1 = latest
  Creator CreateCreator(const v1::CreateJobRequest& req);
  Creator MeshCreator(const std::string& mesh);
  // A worker's restore of an older checkpoint (see the file comment).
  grpc::Status CheckRestore(const Caller& caller, const v1::CreateJobRequest& req);
  // A worker's WriteState behind the latest checkpoint (a rewind).
  grpc::Status CheckRewind(const Caller& caller, ShardJob& job, int64_t step);
  v1::ShardStats StatsOf(ShardJob& job);
  // The joined_epoch of the worker the registry holds for data-parallel
  // `rank` of `job` now (registry rank job.worker_ids()[rank], or `rank`
  // without worker_ids); 0 for none.
  absl::StatusOr<int64_t> RankHolderOf(ShardJob& job, int32_t rank);
  // GetFrameKey when frames go untagged: no key, nothing refused, but the
  // claim is decided (FrameKeys::ClaimsOf), and a handover of the rank to a
  // replacement abandons what the earlier process left unfinished.
  void ClaimUntagged(const std::shared_ptr<ShardJob>& job, const v1::FrameKeyRequest& req);

  JobTable* const jobs_;
  const Transport* const transport_;
  FrameKeys* const frame_keys_;
  RegistryClient* const registry_;
  const ShardServiceOptions options_;
  const Authorizer auth_;
  absl::Mutex mesh_mu_;
  // Mesh group -> its creator: the first non-admin caller of GetMeshKey.
  absl::flat_hash_map<std::string, std::string> mesh_creators_ ABSL_GUARDED_BY(mesh_mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_SERVICE_H_
