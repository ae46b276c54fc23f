#include "server/data_plane.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "rpc/job_spec.h"

namespace tessel {

DataPlane::DataPlane(Transport* transport, Checkpointer* checkpointer)
    : transport_(transport), checkpointer_(checkpointer) {
  transport_->SetHandler([this](const Incoming& in) { return OnFrame(in); });
  compute_ = std::thread([this] { ComputeLoop(); });
}

DataPlane::~DataPlane() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  compute_.join();
}

absl::StatusOr<v1::CreateJobResponse> DataPlane::CreateJob(const v1::CreateJobRequest& req) {
  if (req.spec().checkpoint().every_steps() < 0 || req.spec().checkpoint().keep_last() < 0) {
    return absl::InvalidArgumentError("checkpoint every_steps and keep_last must be >= 0");
  }
  if ((req.spec().checkpoint().every_steps() > 0 || req.spec().checkpoint().initial()) &&
      !checkpointer_->enabled()) {
    return absl::FailedPreconditionError(
        "job asks for periodic checkpoints but this shard server has no --checkpoint_dir");
  }
  if (req.worker_ids_size() != 0) {
    if (req.worker_ids_size() != req.spec().world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("worker_ids lists ", req.worker_ids_size(),
                                                     " workers but world_size is ",
                                                     req.spec().world_size()));
    }
    std::set<int> seen;
    for (int id : req.worker_ids()) {
      if (id < 0 || !seen.insert(id).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("worker_ids must be distinct registry ranks >= 0; ", id, " is not"));
      }
    }
  }
  if (req.replace()) return ReplaceJob(req);
  // A restore loads the checkpoint only if the job is not here yet; a repeat
  // (every worker sends one) falls through to the idempotency check below.
  if (req.restore() && FindJob(req.spec().job()) == nullptr) {
    auto manifest = checkpointer_->Read(req.spec().job(), req.restore_step());
    if (!manifest.ok()) return manifest.status();
    auto restored =
        ShardJob::Restore(req.spec(), req.shard_index(), req.epoch(), *manifest, checkpointer_);
    if (!restored.ok()) return restored.status();
    absl::MutexLock lock(&mu_);
    if (!jobs_.contains((*restored)->job_id())) {
      v1::CreateJobResponse resp;
      resp.set_created(true);
      resp.set_range_begin((*restored)->range().begin);
      resp.set_range_end((*restored)->range().end);
      resp.set_step(manifest->step);
      TESSEL_LOG(INFO) << "restored job '" << req.spec().job() << "' shard " << req.shard_index()
                       << " from the checkpoint of step " << manifest->step << " ("
                       << manifest->num_shards << " shards then, " << req.spec().num_shards()
                       << " now)";
      jobs_[(*restored)->job_id()] = std::move(*restored);
      return resp;
    }
  }
  auto job = ShardJob::Create(req.spec(), req.shard_index(), req.epoch());
  if (!job.ok()) return job.status();
  absl::MutexLock lock(&mu_);
  v1::CreateJobResponse resp;
  auto it = jobs_.find((*job)->job_id());
  if (it != jobs_.end()) {
    ShardJob& have = *it->second;
    if (have.spec().job() != req.spec().job()) {
      return absl::AlreadyExistsError(absl::StrCat("job name '", req.spec().job(),
                                                   "' collides with job '", have.spec().job(),
                                                   "' on the data path; choose another name"));
    }
    // The checkpoint policy may differ between registrants (e.g. a restore by
    // tesselctl, then workers): the first one's stays.
    v1::JobSpec a = have.spec(), b = req.spec();
    a.clear_checkpoint();
    b.clear_checkpoint();
    std::string diff = DiffJobSpecs(a, b);
    if (!diff.empty() || have.shard() != req.shard_index()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "job '", req.spec().job(), "' already exists on this server with a different spec",
          diff.empty() ? absl::StrCat(" (shard ", have.shard(), ")") : absl::StrCat(": ", diff),
          "; every worker must register the same layout, strategy and optimizer"));
    }
    // Workers re-register after membership settles: the epoch moves forward
    // (never back), so frames from the old membership are fenced off.
    if (req.epoch() > have.epoch()) {
      absl::Status s = have.SetEpoch(req.epoch());
      (void)s;
    }
    resp.set_created(false);
    resp.set_range_begin(have.range().begin);
    resp.set_range_end(have.range().end);
    resp.set_step(have.version());
    return resp;
  }
  resp.set_created(true);
  resp.set_range_begin((*job)->range().begin);
  resp.set_range_end((*job)->range().end);
  resp.set_step(0);
  TESSEL_LOG(INFO) << "created job '" << req.spec().job() << "' shard " << req.shard_index()
                   << " range [" << resp.range_begin() << ", " << resp.range_end() << ") "
                   << StrategyName(req.spec().strategy()) << " world " << req.spec().world_size()
                   << " epoch " << req.epoch();
  jobs_[(*job)->job_id()] = std::move(*job);
  return resp;
}

absl::StatusOr<v1::CreateJobResponse> DataPlane::ReplaceJob(const v1::CreateJobRequest& req) {
  const std::string& name = req.spec().job();
  const bool ddp = req.spec().strategy() == v1::STRATEGY_DDP;
  const int64_t step = ddp ? req.start_step() : req.restore_step();
  if (!ddp && (!req.restore() || step < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job '", name, "': a recovery (replace) of a ", StrategyName(req.spec().strategy()),
        " job restores a checkpoint: set restore and a restore_step >= 0"));
  }
  if (ddp && step < 0) return absl::InvalidArgumentError("start_step must be >= 0");
  const std::string where = absl::StrCat("job '", name, "' shard ", req.shard_index(), ": ");
  auto respond = [&](ShardJob& j, bool created) {
    v1::CreateJobResponse resp;
    resp.set_created(created);
    resp.set_range_begin(j.range().begin);
    resp.set_range_end(j.range().end);
    resp.set_step(j.version());
    return resp;
  };
  // Refuses a recovery that an equal or later one has overtaken; accepts the
  // same one again (the coordinator retrying).
  auto overtaken = [&](ShardJob& have) -> std::optional<absl::Status> {
    if (have.epoch() < req.epoch()) return std::nullopt;
    if (have.epoch() == req.epoch() && have.restored_from() == step &&
        have.worker_ids() == std::vector<int>(req.worker_ids().begin(), req.worker_ids().end())) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        where, "the job is at epoch ", have.epoch(), " (restored from step ", have.restored_from(),
        "); a recovery at epoch ", req.epoch(), " from step ", step, " is stale"));
  };
  if (std::shared_ptr<ShardJob> have = FindJob(name)) {
    if (auto done = overtaken(*have)) {
      if (!done->ok()) return *done;
      return respond(*have, false);
    }
  }
  std::unique_ptr<ShardJob> job;
  int64_t from_shards = 0;
  if (ddp) {
    auto created = ShardJob::Create(req.spec(), req.shard_index(), req.epoch());
    if (!created.ok()) return created.status();
    job = std::move(*created);
    job->StartAt(step);
  } else {
    auto manifest = checkpointer_->Read(name, step);
    if (!manifest.ok()) return manifest.status();
    from_shards = manifest->num_shards;
    auto restored =
        ShardJob::Restore(req.spec(), req.shard_index(), req.epoch(), *manifest, checkpointer_);
    if (!restored.ok()) return restored.status();
    job = std::move(*restored);
  }
  job->SetWorkerIds({req.worker_ids().begin(), req.worker_ids().end()});
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job->job_id());
  int64_t dropped_step = -1;
  if (it != jobs_.end()) {
    ShardJob& have = *it->second;
    if (have.spec().job() != name) {
      return absl::AlreadyExistsError(absl::StrCat("job name '", name, "' collides with job '",
                                                   have.spec().job(),
                                                   "' on the data path; choose another name"));
    }
    if (auto done = overtaken(have)) {  // a concurrent replace won the race
      if (!done->ok()) return *done;
      return respond(have, false);
    }
    dropped_step = have.version();
    job->InheritCounters(have);
  }
  TESSEL_LOG(INFO) << "recovery: job '" << name << "' shard " << req.shard_index()
                   << (ddp ? " re-created empty at step "
                           : " restored from the checkpoint of step ")
                   << step << " at epoch " << req.epoch()
                   << (dropped_step >= 0
                           ? absl::StrCat(", dropping its state of step ", dropped_step)
                           : std::string(", new on this server"))
                   << (ddp ? std::string()
                           : absl::StrCat(" (", from_shards, " shards then, ",
                                          req.spec().num_shards(), " now)"));
  v1::CreateJobResponse resp = respond(*job, true);
  jobs_[job->job_id()] = std::move(job);
  const int dropped = checkpointer_->Forget(name, step);
  if (dropped > 0) {
    TESSEL_LOG(INFO) << "recovery: dropped " << dropped << " queued checkpoint write(s) of job '"
                     << name << "' past step " << step;
  }
  return resp;
}

absl::StatusOr<v1::SaveCheckpointResponse> DataPlane::SaveCheckpoint(
    const v1::SaveCheckpointRequest& req) {
  if (!checkpointer_->enabled() && !req.cancel()) {
    return absl::FailedPreconditionError(
        "checkpoints are not enabled on this shard server; start it with --checkpoint_dir=DIR");
  }
  std::shared_ptr<ShardJob> job = FindJob(req.job());
  if (job == nullptr) return absl::NotFoundError(absl::StrCat("no job '", req.job(), "' here"));
  v1::SaveCheckpointResponse resp;
  resp.set_step(req.step());
  if (!req.cancel() && checkpointer_->Read(req.job(), req.step()).ok()) {
    resp.set_immediate(true);  // already complete: nothing to do
    return resp;
  }
  auto snapshot = job->RequestCheckpoint(req.step(), req.cancel());
  if (!snapshot.ok()) return snapshot.status();
  if (snapshot->has_value()) {
    resp.set_immediate(true);
    absl::Status s = checkpointer_->Submit(std::move(**snapshot), /*wait=*/false);  // an RPC
    if (!s.ok()) return s;
  }
  return resp;
}

absl::Status DataPlane::DeleteJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(JobId(job));
  if (it == jobs_.end() || it->second->spec().job() != job) {
    return absl::NotFoundError(absl::StrCat("no job '", job, "' on this server"));
  }
  jobs_.erase(it);
  return absl::OkStatus();
}

std::shared_ptr<ShardJob> DataPlane::FindJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(JobId(job));
  if (it == jobs_.end() || it->second->spec().job() != job) return nullptr;
  return it->second;
}

std::vector<std::shared_ptr<ShardJob>> DataPlane::Jobs() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ShardJob>> out;
  for (auto& [id, job] : jobs_) out.push_back(job);
  return out;
}

int64_t DataPlane::rejected_unrouted() {
  absl::MutexLock lock(&mu_);
  return rejected_unrouted_;
}

Accept DataPlane::OnFrame(const Incoming& in) {
  auto h = DecodeHeader(in.header.data(), in.header.size());
  if (!h.ok()) {
    {
      absl::MutexLock lock(&mu_);
      ++rejected_unrouted_;
    }
    FrameHeader unknown;
    SendError(in.from, unknown, h.status());
    return Accept{};
  }
  if (h->type == FrameType::kError) {
    TESSEL_LOG(WARNING) << "ignoring ERROR frame sent to a server: " << DescribeHeader(*h);
    return Accept{};
  }
  std::shared_ptr<ShardJob> job;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(h->job_id);
    if (it != jobs_.end()) {
      job = it->second;
    } else {
      ++rejected_unrouted_;
    }
  }
  if (job == nullptr) {
    SendError(
        in.from, *h,
        absl::NotFoundError(absl::StrCat("no such job on this shard server (job id ", h->job_id,
                                         "); create it first (CreateJob) or check the job name")));
    return Accept{};
  }
  if (h->payload_bytes != in.payload_bytes) {
    job->CountRejected();
    SendError(in.from, *h,
              absl::InvalidArgumentError(absl::StrCat("frame header announces ", h->payload_bytes,
                                                      " payload bytes but ", in.payload_bytes,
                                                      " arrived (truncated or padded frame)")));
    return Accept{};
  }
  switch (h->type) {
    case FrameType::kPush:
    case FrameType::kInit: {
      auto dst = job->AcceptData(*h);
      if (!dst.ok()) {
        SendError(in.from, *h, dst.status());
        return Accept{};
      }
      FrameHeader header = *h;
      PeerId from = in.from;
      return Accept{
          *dst, [this, job, header, from](absl::Status s) {
            if (!s.ok()) {
              TESSEL_LOG(WARNING) << "receive of " << DescribeHeader(header) << " failed: " << s;
              SendError(from, header, s);
            }
            ShardJob::Completion c = job->CompleteReceive(header, s);
            if (c.serve.snapshot.has_value()) {  // step 0 (CheckpointPolicy.initial)
              // The transport's thread: never wait here.
              absl::Status w = checkpointer_->Submit(std::move(*c.serve.snapshot), /*wait=*/false);
              if (!w.ok()) TESSEL_LOG(ERROR) << "checkpoint not taken: " << w;
            }
            if (c.update.has_value()) {
              absl::MutexLock lock(&mu_);
              updates_.emplace_back(job, *c.update);
            }
            if (!c.serve.pullers.empty()) ServeParams(job, c.serve);
          }};
    }
    case FrameType::kPull: {
      auto serve = job->AcceptPull(*h, in.from);
      if (!serve.ok()) {
        SendError(in.from, *h, serve.status());
      } else if (!serve->pullers.empty()) {
        ServeParams(job, *serve);
      }
      return Accept{};
    }
    default:
      job->CountRejected();
      SendError(in.from, *h,
                absl::InvalidArgumentError(absl::StrCat("shard servers do not accept ",
                                                        FrameTypeName(h->type), " frames")));
      return Accept{};
  }
}

void DataPlane::SendError(PeerId to, const FrameHeader& about, const absl::Status& s) {
  TESSEL_LOG(DEBUG) << "refusing " << DescribeHeader(about) << ": " << s;
  FrameHeader h = about;
  h.type = FrameType::kError;
  h.code = static_cast<int32_t>(s.code());
  auto message = std::make_shared<std::string>(s.message());
  h.payload_bytes = message->size();
  HeaderBytes bytes = EncodeHeader(h);
  transport_->Send(to, absl::MakeConstSpan(bytes), message->data(), message->size(),
                   [message](absl::Status) {});
}

void DataPlane::ServeParams(const std::shared_ptr<ShardJob>& job, const ShardJob::Serve& serve) {
  const int64_t epoch = job->epoch();
  for (const ShardJob::Puller& p : serve.pullers) {
    if (p.bucket_count == 0) {  // notify only: the shard reached the step
      FrameHeader h;
      h.type = FrameType::kParams;
      h.job_id = job->job_id();
      h.epoch = epoch;
      h.step = serve.version;
      h.rank = p.rank;
      h.shard = job->shard();
      h.bucket = p.first_bucket;
      HeaderBytes bytes = EncodeHeader(h);
      transport_->Send(p.reply_to, absl::MakeConstSpan(bytes), nullptr, 0, nullptr);
      continue;
    }
    for (int b = p.first_bucket; b < p.first_bucket + p.bucket_count; ++b) {
      FrameHeader h;
      h.type = FrameType::kParams;
      h.job_id = job->job_id();
      h.epoch = epoch;
      h.step = serve.version;
      h.rank = p.rank;
      h.shard = job->shard();
      h.bucket = b;
      h.bucket_count = static_cast<uint32_t>(p.bucket_count);
      h.payload_bytes = job->served_bytes(b);
      HeaderBytes bytes = EncodeHeader(h);
      job->CountPulled(h.payload_bytes);
      transport_->Send(p.reply_to, absl::MakeConstSpan(bytes), job->served_bucket(b),
                       h.payload_bytes, [job](absl::Status s) {
                         if (!s.ok()) TESSEL_LOG(WARNING) << "sending parameters failed: " << s;
                       });
    }
  }
}

void DataPlane::ComputeLoop() {
  for (;;) {
    std::pair<std::shared_ptr<ShardJob>, int> work;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DataPlane* d)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) { return d->stop_ || !d->updates_.empty(); },
          this));
      if (stop_) return;
      work = std::move(updates_.front());
      updates_.pop_front();
    }
    ShardJob::Serve serve = work.first->UpdateBucket(work.second);
    if (serve.snapshot.has_value()) {
      absl::Status s = checkpointer_->Submit(std::move(*serve.snapshot));
      if (!s.ok()) TESSEL_LOG(ERROR) << "checkpoint not taken: " << s;
    }
    if (!serve.pullers.empty()) ServeParams(work.first, serve);
  }
}

}  // namespace tessel
