#include "server/shard_service.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/job_name.h"
#include "core/status_macros.h"
#include "rpc/grpc_util.h"
#include "rpc/job_spec.h"
#include "rpc/limits.h"
#include "runtime/version.h"
#include "server/shard_job_proto.h"

namespace tessel {
namespace {

grpc::Status NoJob(const std::string& job) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND,
                      absl::StrCat("no job '", job, "' on this shard server"));
}

v1::CheckpointInfo InfoOf(const Manifest& m, bool with_manifest) {
  v1::CheckpointInfo info;
  info.set_job(m.job);
  info.set_step(m.step);
  info.set_epoch(m.epoch);
  info.set_num_shards(m.num_shards);
  info.set_num_params(m.num_params);
  int64_t bytes = 0;
  for (const ShardEntry& e : m.shards) {
    bytes += e.bytes;
    info.add_snapshot_pause_us(e.snapshot_pause_us);
  }
  info.set_bytes(bytes);
  info.set_created_unix_ms(m.created_unix_ms);
  if (with_manifest) info.set_manifest_json(ManifestToJson(m));
  return info;
}
}  // namespace

grpc::Status ShardService::Authorize(grpc::ServerContext* ctx, absl::string_view rpc,
                                     absl::string_view job, const std::function<Creator()>& creator,
                                     Caller* identified) {
  if (!auth_.enabled()) return grpc::Status::OK;
  if (identified == nullptr && !auth_.policy().NeedsCredential("ShardServer", rpc)) {
    return grpc::Status::OK;
  }
  Caller caller = auth_.Identify(*ctx);
  Creator made;
  if (creator && caller.ReachesOnlyByDerivation(job)) made = creator();
  grpc::Status s = auth_.Check(caller, "ShardServer", rpc, job, made);
  if (identified != nullptr) *identified = std::move(caller);
  return s;
}

Creator ShardService::LiveCreator(const std::string& job) {
  std::shared_ptr<ShardJob> have = jobs_->FindJob(job);
  if (have == nullptr) return std::nullopt;
  return have->creator();
}

Creator ShardService::CheckpointCreator(const std::string& job, int64_t step) {
  absl::StatusOr<Manifest> m = jobs_->checkpointer()->Read(job, step);
  if (!m.ok()) return std::nullopt;  // nothing to reach; the RPC itself reports it
  return m->creator;
}

Creator ShardService::CreateCreator(const v1::CreateJobRequest& req) {
  const std::string& job = req.spec().job();
  if (Creator live = LiveCreator(job)) return live;
  if (req.restore()) {
    if (Creator restored = CheckpointCreator(job, req.restore_step())) return restored;
  }
  return CheckpointCreator(job, -1);
}

Creator ShardService::MeshCreator(const std::string& mesh) {
  absl::MutexLock lock(&mesh_mu_);
  auto it = mesh_creators_.find(mesh);
  if (it == mesh_creators_.end()) return std::nullopt;
  return it->second;
}

grpc::Status ShardService::CheckRestore(const Caller& caller, const v1::CreateJobRequest& req) {
  if (!auth_.enabled() || !req.restore() || req.restore_step() < 0 || caller.Has(Role::kAdmin)) {
    return grpc::Status::OK;
  }
  const std::string& job = req.spec().job();
  const int64_t step = req.restore_step();
  if (std::shared_ptr<ShardJob> have = jobs_->FindJob(job)) {
    // Nothing is loaded: a restore of a job already here only joins it, and
    // one that stands at `step`, restored from it, loses nothing.
    if (!req.replace()) return grpc::Status::OK;
    if (have->restored_from() == step && have->version() == step) return grpc::Status::OK;
  }
  auto all = jobs_->checkpointer()->List(job);
  if (!all.ok()) return grpc::Status::OK;  // the restore itself reports it
  const int64_t settled_ms = absl::ToUnixMillis(absl::Now() - kRecentCheckpointGrace);
  int64_t latest = -1, latest_settled = -1;
  for (const Manifest& m : *all) {
    latest = std::max(latest, m.step);
    if (m.created_unix_ms <= settled_ms) latest_settled = std::max(latest_settled, m.step);
  }
  if (step >= latest_settled) return grpc::Status::OK;
  return auth_.Deny(
      caller, "CreateJob",
      absl::StrCat("restore the checkpoint of step ", step, " of job '", job,
                   "': the latest complete checkpoint is step ", latest,
                   ", and going back to an older one is an operator's rewind"),
      absl::StrCat("tesselctl checkpoint restore --job ", job, " --step ", step,
                   " --token_file=ADMIN_TOKEN_FILE, then start the workers with --resume "
                   "--resume_step=",
                   step));
}

v1::ShardStats ShardService::StatsOf(ShardJob& job) {
  job.SetCheckpointProgress(jobs_->checkpointer()->Progress(job.spec().job()));
  v1::ShardStats stats = ShardStatsProto(job);
  if (frame_keys_ != nullptr) stats.set_frame_key_handovers(frame_keys_->handovers(job.job_id()));
  return stats;
}

absl::StatusOr<int64_t> ShardService::RankHolderOf(ShardJob& job, int32_t rank) {
  if (registry_ == nullptr) return 0;
  const std::vector<int> ids = job.worker_ids();
  if (!ids.empty() && static_cast<size_t>(rank) >= ids.size()) return 0;
  const int id = ids.empty() ? rank : ids[static_cast<size_t>(rank)];
  // The job's workers are registered in the group named after it.
  TESSEL_ASSIGN_OR_RETURN(const v1::View view, registry_->GetView(job.spec().job()));
  for (const v1::Member& m : view.members()) {
    if (m.role() == v1::ROLE_WORKER && m.rank() == id) return m.joined_epoch();
  }
  return 0;
}

grpc::Status ShardService::CheckRewind(const Caller& caller, ShardJob& job, int64_t step) {
  if (!auth_.enabled() || caller.Has(Role::kAdmin) || step >= job.version()) {
    return grpc::Status::OK;
  }
  // Back within the steps since the latest complete checkpoint: the
  // workers' own (tessel.torch's load_state_dict of an earlier state_dict).
  // Behind it: the rewind a worker's restore may not do either.
  const std::string& name = job.spec().job();
  if (!jobs_->checkpointer()->enabled()) return grpc::Status::OK;
  absl::StatusOr<std::vector<Manifest>> all = jobs_->checkpointer()->List(name);
  if (absl::IsNotFound(all.status())) return grpc::Status::OK;
  TESSEL_RETURN_IF_ERROR_AS(all.status(), ToGrpc);  // unknown: refused, not allowed
  int64_t latest = -1;
  for (const Manifest& m : *all) latest = std::max(latest, m.step);
  if (step >= latest) return grpc::Status::OK;
  return auth_.Deny(
      caller, "WriteState",
      absl::StrCat("write step ", step, " into job '", name, "' (at step ", job.version(),
                   "): the latest complete checkpoint is step ", latest,
                   ", and going back behind it is an operator's rewind"),
      absl::StrCat("tesselctl checkpoint restore --job ", name,
                   " --step STEP --token_file=ADMIN_TOKEN_FILE goes back to a checkpoint, or make "
                   "the same load with an admin credential; a worker's credential may load the "
                   "state into a job not past step ",
                   step, " (a new job, or one started without --resume)"));
}

grpc::Status ShardService::CreateJob(grpc::ServerContext* ctx, const v1::CreateJobRequest* req,
                                     v1::CreateJobResponse* resp) {
  Caller caller;
  TESSEL_RETURN_IF_ERROR(Authorize(
      ctx, "CreateJob", req->spec().job(), [&] { return CreateCreator(*req); }, &caller));
  TESSEL_RETURN_IF_ERROR(CheckRestore(caller, *req));
  if (req->shard_index() != options_.shard_index) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("this server is shard ", options_.shard_index,
                     " of its pool; CreateJob asked for shard ", req->shard_index()));
  }
  TESSEL_ASSIGN_OR_RETURN_AS(*resp, jobs_->CreateJob(*req, caller.Identity()), ToGrpc);
  return grpc::Status::OK;
}

grpc::Status ShardService::SetEpoch(grpc::ServerContext* ctx, const v1::SetEpochRequest* req,
                                    v1::SetEpochResponse* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "SetEpoch", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  absl::Status s = job->SetEpoch(req->epoch());
  resp->set_epoch(job->epoch());
  return ToGrpc(s);
}

grpc::Status ShardService::SetOptimizer(grpc::ServerContext* ctx,
                                        const v1::SetOptimizerRequest* req,
                                        v1::SetOptimizerResponse* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "SetOptimizer", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  auto optimizer = OptimizerFromProto(req->optimizer());
  if (!optimizer.ok()) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("job '", req->job(), "': ", optimizer.status().message())));
  }
  absl::Status s = job->SetOptimizer(*optimizer, req->step());
  resp->set_step(job->version());
  return ToGrpc(s);
}

grpc::Status ShardService::SkipTensors(grpc::ServerContext* ctx, const v1::SkipTensorsRequest* req,
                                       v1::SkipTensorsResponse* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "SkipTensors", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  absl::Status s = job->SkipTensors(
      std::vector<int32_t>(req->tensors().begin(), req->tensors().end()), req->step());
  resp->set_step(job->version());
  return ToGrpc(s);
}

grpc::Status ShardService::GetStats(grpc::ServerContext* ctx, const v1::JobRef* req,
                                    v1::ShardStats* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "GetStats", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  *resp = StatsOf(*job);
  return grpc::Status::OK;
}

grpc::Status ShardService::GetFrameKey(grpc::ServerContext* ctx, const v1::FrameKeyRequest* req,
                                       v1::FrameKeyResponse* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "GetFrameKey", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  std::shared_ptr<JobFrameKeys> keys =
      frame_keys_ != nullptr ? frame_keys_->For(job->job_id(), job->shard()) : nullptr;
  if (keys == nullptr) {  // frames go untagged: no key, nothing refused
    if (frame_keys_ != nullptr) ClaimUntagged(job, *req);
    return grpc::Status::OK;
  }
  const std::string where = absl::StrCat("GetFrameKey of job '", req->job(), "': ");
  // Nothing below trusts the caller: its rank must be the job's, its epoch
  // the job's current one (a key for an epoch to come could be claimed
  // before its worker exists), its claim a real one.
  if (req->claim().size() < kMinFrameKeyClaimBytes ||
      req->claim().size() > kMaxFrameKeyClaimBytes) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat(where, "a request names its rank, epoch and a claim of ",
                     kMinFrameKeyClaimBytes, " to ", kMaxFrameKeyClaimBytes, " bytes (got ",
                     req->claim().size(),
                     "); a worker from before per-rank frame keys cannot run against this "
                     "server: upgrade it"));
  }
  const int world = job->spec().world_size();
  if (req->rank() < 0 || req->rank() >= world) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(where, "rank ", req->rank(), " is outside [0, ", world, ")"));
  }
  if (req->epoch() != job->epoch()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat(where, "the job is at epoch ", job->epoch(), ", not ",
                                     req->epoch(), "; recover (or re-register) first"));
  }
  if (keys->payload() && req->max_key_version() < kPayloadKeysVersion) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        absl::StrCat(where,
                     "this server checks a tag of every frame's payload "
                     "(--data_integrity=payload) and this worker does not make them (it is from "
                     "before payload integrity): upgrade the worker, or run the servers with "
                     "--data_integrity=header"));
  }
  if (req->member_epoch() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(where, "member_epoch ", req->member_epoch(),
                                     " is negative; it is the caller's registry joined_epoch "
                                     "(0: not said)"));
  }
  const FrameKeyClaim claim{req->job(), req->rank(), req->epoch(), req->claim(),
                            req->member_epoch()};
  bool handed_over = false;
  TESSEL_ASSIGN_OR_RETURN_AS(
      const int32_t generation,
      frame_keys_->Claim(
          *keys, claim, job, [&] { return RankHolderOf(*job, req->rank()); }, &handed_over),
      ToGrpc);
  // The rank's earlier process is gone (or fenced): the receives it left
  // unfinished are owed again, before the replacement holds the keys to
  // push them (it reads the stats after this answer).
  if (handed_over) job->AbandonReceives(req->rank());
  resp->set_secret(keys->RankSecret(req->rank(), req->epoch(), generation));
  resp->set_key_version(keys->payload() ? kPayloadKeysVersion : kRankKeysVersion);
  // The rank's host group, if it has other ranks: their frames to each
  // other (host aggregation) carry the group's tag.
  const auto& groups = job->spec().rank_groups();
  if (groups.size() == world) {
    const int32_t group = groups[req->rank()];
    if (std::count(groups.begin(), groups.end(), group) > 1) {
      resp->set_host_secret(keys->HostSecret(group, req->epoch()));
    }
  }
  return grpc::Status::OK;
}

void ShardService::ClaimUntagged(const std::shared_ptr<ShardJob>& job,
                                 const v1::FrameKeyRequest& req) {
  // A request the keyed path would refuse claims nothing here (a worker
  // from before claims, a stale epoch): it is answered as always.
  if (req.claim().size() < kMinFrameKeyClaimBytes || req.claim().size() > kMaxFrameKeyClaimBytes ||
      req.rank() < 0 || req.rank() >= job->spec().world_size() || req.epoch() != job->epoch() ||
      req.member_epoch() < 0) {
    return;
  }
  const FrameKeyClaim claim{req.job(), req.rank(), req.epoch(), req.claim(), req.member_epoch()};
  bool handed_over = false;
  // A refusal refuses nothing when frames go untagged.
  (void)frame_keys_->Claim(
      *frame_keys_->ClaimsOf(job->job_id(), job->shard()), claim, job,
      [&] { return RankHolderOf(*job, req.rank()); }, &handed_over);
  if (handed_over) job->AbandonReceives(req.rank());
}

grpc::Status ShardService::GetMeshKey(grpc::ServerContext* ctx, const v1::MeshKeyRequest* req,
                                      v1::FrameKeyResponse* resp) {
  if (!IsMeshGroup(req->mesh())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("GetMeshKey: '", req->mesh(),
                                     "' is no mesh group (a hybrid job's mesh is '<job>.mesh')"));
  }
  Caller caller;
  TESSEL_RETURN_IF_ERROR(Authorize(
      ctx, "GetMeshKey", req->mesh(), [&] { return MeshCreator(req->mesh()); }, &caller));
  if (!req->keep().empty() && req->keep().size() != kJobSecretBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("GetMeshKey: a mesh secret is ", kJobSecretBytes,
                                     " bytes; `keep` has ", req->keep().size()));
  }
  if (auth_.enabled() && !caller.Has(Role::kAdmin)) {
    // The first asker becomes the mesh's creator; checked again against the
    // creator now recorded, in case another tenant's first ask won a race.
    std::string bound;
    {
      absl::MutexLock lock(&mesh_mu_);
      bound = mesh_creators_.try_emplace(req->mesh(), caller.Identity()).first->second;
    }
    if (caller.ReachesOnlyByDerivation(req->mesh())) {
      TESSEL_RETURN_IF_ERROR(auth_.Check(caller, "ShardServer", "GetMeshKey", req->mesh(), bound));
    }
  }
  if (frame_keys_ != nullptr) {
    resp->set_secret(frame_keys_->MeshSecret(req->mesh(), req->keep()));
  }
  return grpc::Status::OK;
}

grpc::Status ShardService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest*,
                                    v1::ListJobsResponse* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "ListJobs"));
  // A caller that holds only job-scoped worker credentials sees its jobs.
  std::optional<Caller> scoped;
  if (auth_.enabled() && !auth_.options().allow_anonymous_reads) {
    Caller caller = auth_.Identify(*ctx);
    bool all = false;
    for (const Grant& g : caller.grants) all = all || g.role != Role::kWorker || g.jobs.empty();
    if (!all) scoped = std::move(caller);
  }
  for (auto& job : jobs_->Jobs()) {
    if (scoped.has_value() && !scoped->MayActOnJob(job->spec().job(), job->creator())) continue;
    *resp->add_jobs() = StatsOf(*job);
  }
  return grpc::Status::OK;
}

grpc::Status ShardService::DeleteJob(grpc::ServerContext* ctx, const v1::JobRef* req,
                                     v1::DeleteJobResponse*) {
  if (auth_.enabled()) {
    // A worker may clean up the reducer helper jobs its SDK created.
    const Caller caller = auth_.Identify(*ctx);
    if (!IsHelperJob(req->job()) || !caller.MayActOnJob(req->job(), LiveCreator(req->job()))) {
      TESSEL_RETURN_IF_ERROR(auth_.Check(caller, "ShardServer", "DeleteJob", req->job()));
    }
  }
  return ToGrpc(jobs_->DeleteJob(req->job()));
}

grpc::Status ShardService::GetServerInfo(grpc::ServerContext* ctx, const v1::ServerInfoRequest*,
                                         v1::ServerInfoResponse* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "GetServerInfo"));
  resp->set_version(kVersion);
  resp->set_ucx_address(transport_->address());
  resp->set_shard_index(options_.shard_index);
  resp->set_pool(options_.pool);
  resp->set_security(options_.security);
  return grpc::Status::OK;
}

grpc::Status ShardService::SaveCheckpoint(grpc::ServerContext* ctx,
                                          const v1::SaveCheckpointRequest* req,
                                          v1::SaveCheckpointResponse* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "SaveCheckpoint", req->job(), [&] { return LiveCreator(req->job()); }));
  TESSEL_ASSIGN_OR_RETURN_AS(*resp, jobs_->SaveCheckpoint(*req), ToGrpc);
  return grpc::Status::OK;
}

grpc::Status ShardService::ListCheckpoints(grpc::ServerContext* ctx, const v1::JobRef* req,
                                           v1::ListCheckpointsResponse* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "ListCheckpoints", req->job(),
                                   [&] { return CheckpointCreator(req->job(), -1); }));
  TESSEL_ASSIGN_OR_RETURN_AS(auto all, jobs_->checkpointer()->List(req->job()), ToGrpc);
  for (const Manifest& m : all) *resp->add_checkpoints() = InfoOf(m, false);
  return grpc::Status::OK;
}

grpc::Status ShardService::GetCheckpoint(grpc::ServerContext* ctx, const v1::CheckpointRef* req,
                                         v1::CheckpointInfo* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "GetCheckpoint", req->job(),
                                   [&] { return CheckpointCreator(req->job(), req->step()); }));
  TESSEL_ASSIGN_OR_RETURN_AS(auto m, jobs_->checkpointer()->Read(req->job(), req->step()), ToGrpc);
  *resp = InfoOf(m, true);
  return grpc::Status::OK;
}

grpc::Status ShardService::VerifyCheckpoint(grpc::ServerContext* ctx, const v1::CheckpointRef* req,
                                            v1::VerifyCheckpointResponse* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "VerifyCheckpoint", req->job(),
                                   [&] { return CheckpointCreator(req->job(), req->step()); }));
  TESSEL_ASSIGN_OR_RETURN_AS(auto m, jobs_->checkpointer()->Read(req->job(), req->step()), ToGrpc);
  TESSEL_ASSIGN_OR_RETURN_AS(auto problems, jobs_->checkpointer()->Verify(m), ToGrpc);
  resp->set_ok(problems.empty());
  for (const std::string& p : problems) resp->add_problems(p);
  return grpc::Status::OK;
}

grpc::Status ShardService::DeleteCheckpoint(grpc::ServerContext* ctx, const v1::CheckpointRef* req,
                                            v1::DeleteCheckpointResponse*) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "DeleteCheckpoint", req->job()));
  return ToGrpc(jobs_->checkpointer()->Delete(req->job(), req->step()));
}

grpc::Status ShardService::ReadCheckpoint(grpc::ServerContext* ctx,
                                          const v1::ReadCheckpointRequest* req,
                                          v1::CheckpointParams* resp) {
  TESSEL_RETURN_IF_ERROR(Authorize(ctx, "ReadCheckpoint", req->job(),
                                   [&] { return CheckpointCreator(req->job(), req->step()); }));
  if (req->count() < 0 || req->count() > kMaxStateElementsPerCall) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "ReadCheckpoint count ", req->count(), " is outside [0, ", kMaxStateElementsPerCall, "]")));
  }
  TESSEL_ASSIGN_OR_RETURN_AS(auto m, jobs_->checkpointer()->Read(req->job(), req->step()), ToGrpc);
  // Checked without computing offset + count, which overflows for an offset
  // near the int64 maximum (count is in [0, kMaxStateElementsPerCall]).
  if (req->offset() < 0 || req->offset() > m.num_params ||
      req->count() > m.num_params - req->offset()) {
    return ToGrpc(absl::OutOfRangeError(absl::StrCat(
        "ReadCheckpoint of ", req->count(), " parameters at offset ", req->offset(),
        " is outside the ", m.num_params, " of checkpoint '", m.job, "' step ", m.step)));
  }
  const Range target{req->offset(), req->offset() + req->count()};
  std::string bytes(static_cast<size_t>(req->count()) * sizeof(float), '\0');
  TESSEL_RETURN_IF_ERROR_AS(
      jobs_->checkpointer()->ReadParams(m, target, reinterpret_cast<float*>(bytes.data())), ToGrpc);
  resp->set_step(m.step);
  resp->set_num_params(m.num_params);
  resp->set_offset(req->offset());
  resp->set_params(std::move(bytes));
  return grpc::Status::OK;
}

grpc::Status ShardService::ReadState(grpc::ServerContext* ctx, const v1::ReadStateRequest* req,
                                     v1::ShardState* resp) {
  TESSEL_RETURN_IF_ERROR(
      Authorize(ctx, "ReadState", req->job(), [&] { return LiveCreator(req->job()); }));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  TESSEL_ASSIGN_OR_RETURN_AS(*resp, ReadShardState(*job, *req), ToGrpc);
  return grpc::Status::OK;
}

grpc::Status ShardService::WriteState(grpc::ServerContext* ctx, const v1::WriteStateRequest* req,
                                      v1::WriteStateResponse* resp) {
  Caller caller;
  TESSEL_RETURN_IF_ERROR(Authorize(
      ctx, "WriteState", req->job(), [&] { return LiveCreator(req->job()); }, &caller));
  auto job = jobs_->FindJob(req->job());
  if (job == nullptr) return NoJob(req->job());
  TESSEL_RETURN_IF_ERROR(CheckRewind(caller, *job, req->step()));
  TESSEL_ASSIGN_OR_RETURN_AS(*resp, WriteShardState(*job, *req), ToGrpc);
  return grpc::Status::OK;
}

}  // namespace tessel
