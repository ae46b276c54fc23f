#include "worker/internal/job_control.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/job_spec.h"
#include "runtime/log.h"

namespace tessel::internal {

using Stub = v1::ShardServer::Stub;

std::vector<int> JobControl::Shards() const {
  std::vector<int> shards = fleet_->shards();
  if (num_shards_ >= 0) {
    shards.erase(std::remove_if(shards.begin(), shards.end(),
                                [this](int shard) { return shard >= num_shards_; }),
                 shards.end());
  }
  return shards;
}

bool JobControl::InStep(int shard) const {
  const Layout* layout = ctx_->layout.get();
  return layout == nullptr || shard >= layout->num_shards() || !layout->shard_empty(shard);
}

absl::Status JobControl::ForEach(const PerShard& call) const {
  for (int shard : Shards()) TESSEL_RETURN_IF_ERROR(call(shard));
  return absl::OkStatus();
}

absl::Status JobControl::ForAll(const PerShard& call) const {
  absl::Status first;
  for (int shard : Shards()) {
    absl::Status s = call(shard);
    if (first.ok()) first = std::move(s);
  }
  return first;
}

std::string JobControl::What(absl::string_view call) const {
  return absl::StrCat(ctx_->Where(), ": ", call);
}

v1::JobRef JobControl::Ref() const {
  v1::JobRef ref;
  ref.set_job(ctx_->options.job);
  return ref;
}

absl::Status JobControl::CreateJob(const v1::CreateJobRequest& request, absl::string_view what,
                                   const CreateCheck& check, bool* refused) const {
  const std::string call = What(what);
  if (refused != nullptr) *refused = false;
  return ForEach([&](int shard) -> absl::Status {
    v1::CreateJobRequest req = request;
    req.set_shard_index(shard);
    v1::CreateJobResponse resp;
    TESSEL_RETURN_IF_ERROR(
        fleet_->Call(shard, &Stub::CreateJob, req, &resp, call, absl::Minutes(5)));
    const Range r = ctx_->layout->shard_range(shard);
    absl::Status s = absl::OkStatus();
    if (resp.range_begin() != r.begin || resp.range_end() != r.end) {
      s = absl::InternalError(absl::StrCat(
          ctx_->Where(), ": shard ", shard, " derived range [", resp.range_begin(), ", ",
          resp.range_end(), ") but this worker derived [", r.begin, ", ", r.end, ")"));
    } else if (check && InStep(shard)) {
      s = check(shard, resp);
    }
    if (!s.ok() && refused != nullptr) *refused = true;
    return s;
  });
}

absl::StatusOr<std::vector<FrameKeyGrant>> JobControl::FrameKeys() const {
  const std::string call = What("GetFrameKey");
  v1::FrameKeyRequest req;
  req.set_job(ctx_->options.job);
  req.set_rank(ctx_->rank.load());
  req.set_epoch(ctx_->epoch.load());
  req.set_claim(ctx_->frame_key_claim);
  req.set_member_epoch(ctx_->member_epoch.load());
  req.set_max_key_version(kPayloadKeysVersion);
  std::vector<FrameKeyGrant> grants;
  TESSEL_RETURN_IF_ERROR(ForEach([&](int shard) -> absl::Status {
    v1::FrameKeyResponse resp;
    absl::Status got = fleet_->Call(shard, &Stub::GetFrameKey, req, &resp, call);
    // A server from before data-path authentication has no GetFrameKey: it
    // takes and sends untagged frames, as before.
    if (!got.ok() && !absl::IsUnimplemented(got)) return got;
    if (!resp.secret().empty() && resp.key_version() != kRankKeysVersion &&
        resp.key_version() != kPayloadKeysVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          ctx_->Where(), ": shard ", shard,
          " hands out one frame key for the whole job (a server from before per-rank keys); "
          "upgrade the shard servers"));
    }
    if (grants.size() <= static_cast<size_t>(shard)) grants.resize(shard + 1);
    // Version 3: the server tags and checks payloads too (the whole job does).
    grants[static_cast<size_t>(shard)] =
        FrameKeyGrant{resp.secret(), resp.host_secret(), resp.key_version() == kPayloadKeysVersion};
    return absl::OkStatus();
  }));
  return grants;
}

absl::Status JobControl::SetOptimizer(const OptimizerParams& optimizer, int64_t step) const {
  v1::SetOptimizerRequest req;
  req.set_job(ctx_->options.job);
  *req.mutable_optimizer() = OptimizerToProto(optimizer);
  req.set_step(step);
  const std::string call = What("SetOptimizer");
  return ForAll([&](int shard) {
    if (!InStep(shard)) return absl::OkStatus();
    v1::SetOptimizerResponse resp;
    return fleet_->Call(shard, &Stub::SetOptimizer, req, &resp, call);
  });
}

absl::Status JobControl::SkipTensors(absl::Span<const int32_t> tensors, int64_t step) const {
  v1::SkipTensorsRequest req;
  req.set_job(ctx_->options.job);
  req.set_step(step);
  for (int32_t t : tensors) req.add_tensors(t);
  const Layout& layout = *ctx_->layout;
  const std::string call = What("SkipTensors");
  return ForAll([&](int shard) {
    if (!InStep(shard)) return absl::OkStatus();
    const Range r = layout.shard_range(shard);
    bool holds = false;
    for (int32_t t : tensors) {
      holds = holds || layout.tensors()[static_cast<size_t>(t)].range().Overlaps(r);
    }
    if (!holds) return absl::OkStatus();
    v1::SkipTensorsResponse resp;
    return fleet_->Call(shard, &Stub::SkipTensors, req, &resp, call);
  });
}

absl::Status JobControl::SaveCheckpoint(int64_t step) const {
  v1::SaveCheckpointRequest req;
  req.set_job(ctx_->options.job);
  req.set_step(step);
  const std::string call = What("SaveCheckpoint");
  return ForAll([&](int shard) {
    if (!InStep(shard)) return absl::OkStatus();  // shard 0 writes its part
    v1::SaveCheckpointResponse resp;
    return fleet_->Call(shard, &Stub::SaveCheckpoint, req, &resp, call);
  });
}

void JobControl::DeleteJob() const {
  const v1::JobRef ref = Ref();
  const std::string call = What("DeleteJob");
  // Best effort on every shard: a failure is logged, the others still go.
  for (int shard : Shards()) {
    v1::DeleteJobResponse resp;
    absl::Status d = fleet_->Call(shard, &Stub::DeleteJob, ref, &resp, call, absl::Seconds(5));
    if (!d.ok() && !absl::IsNotFound(d)) {
      TESSEL_LOG(WARNING) << ctx_->Where() << ": could not delete job '" << ctx_->options.job
                          << "': " << d.message();
    }
  }
}

absl::StatusOr<std::vector<v1::ShardStats>> JobControl::Stats(absl::Duration timeout) const {
  const v1::JobRef ref = Ref();
  const std::string call = What("GetStats");
  std::vector<v1::ShardStats> out;
  absl::Status s = ForEach([&](int shard) {
    v1::ShardStats st;
    absl::Status g = fleet_->Call(shard, &Stub::GetStats, ref, &st, call, timeout);
    if (g.ok()) out.push_back(std::move(st));
    return g;
  });
  TESSEL_RETURN_IF_ERROR(s);
  return out;
}

absl::StatusOr<int64_t> JobControl::MaxEpoch() const {
  const v1::JobRef ref = Ref();
  const std::string call = What("GetStats");
  int64_t epoch = -1;
  absl::Status s = ForEach([&](int shard) {
    v1::ShardStats st;
    absl::Status g = fleet_->Call(shard, &Stub::GetStats, ref, &st, call);
    if (g.ok()) epoch = std::max(epoch, st.epoch());
    return absl::IsNotFound(g) ? absl::OkStatus() : g;
  });
  TESSEL_RETURN_IF_ERROR(s);
  return epoch;
}

absl::StatusOr<v1::ShardStats> JobControl::FirstShardStats() const {
  v1::ShardStats st;
  TESSEL_RETURN_IF_ERROR(fleet_->Call(0, &Stub::GetStats, Ref(), &st, What("GetStats")));
  return st;
}

absl::StatusOr<std::vector<int64_t>> JobControl::CheckpointSteps() const {
  v1::ListCheckpointsResponse resp;
  absl::Status s =
      fleet_->Call(0, &Stub::ListCheckpoints, Ref(), &resp, What("listing the job's checkpoints"));
  if (absl::IsNotFound(s)) return std::vector<int64_t>();
  TESSEL_RETURN_IF_ERROR(s);
  std::vector<int64_t> steps;
  for (const v1::CheckpointInfo& c : resp.checkpoints()) steps.push_back(c.step());
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<v1::CheckpointInfo> JobControl::GetCheckpoint(int64_t step,
                                                             absl::string_view what) const {
  v1::CheckpointRef ref;
  ref.set_job(ctx_->options.job);
  ref.set_step(step);
  v1::CheckpointInfo info;
  TESSEL_RETURN_IF_ERROR(fleet_->Call(0, &Stub::GetCheckpoint, ref, &info, What(what)));
  return info;
}

absl::StatusOr<bool> JobControl::UnderWay(bool checkpoints) const {
  auto stats = FirstShardStats();
  if (stats.ok() && stats->step() > 0) return true;
  if (!stats.ok() && !absl::IsNotFound(stats.status())) return stats.status();
  if (!checkpoints) return false;
  v1::ListCheckpointsResponse resp;
  absl::Status s = fleet_->Call(0, &Stub::ListCheckpoints, Ref(), &resp, What("ListCheckpoints"));
  if (absl::IsNotFound(s) || absl::IsFailedPrecondition(s)) return false;
  TESSEL_RETURN_IF_ERROR(s);
  return resp.checkpoints_size() > 0;
}

}  // namespace tessel::internal
