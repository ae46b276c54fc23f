#include "server/job_table.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "rpc/job_spec.h"
#include "runtime/log.h"

namespace tessel {

JobTable::JobTable(Checkpointer* checkpointer, std::shared_ptr<PayloadMemory> memory,
                   bool fold_prefix)
    : checkpointer_(checkpointer), memory_(std::move(memory)), fold_prefix_(fold_prefix) {}

absl::StatusOr<v1::CreateJobResponse> JobTable::CreateJob(const v1::CreateJobRequest& req,
                                                          const std::string& creator) {
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
  if (req.replace()) return ReplaceJob(req, creator);
  // A restore loads the checkpoint only if the job is not here yet; a repeat
  // (every worker sends one) falls through to the idempotency check below.
  if (req.restore() && FindJob(req.spec().job()) == nullptr) {
    TESSEL_ASSIGN_OR_RETURN(auto manifest,
                            checkpointer_->Read(req.spec().job(), req.restore_step()));
    TESSEL_ASSIGN_OR_RETURN(auto restored,
                            ShardJob::Restore(req.spec(), req.shard_index(), req.epoch(), manifest,
                                              checkpointer_, memory_));
    restored->set_fold_prefix(fold_prefix_);
    restored->SetCreator(manifest.creator.empty() ? creator : manifest.creator);
    absl::MutexLock lock(&mu_);
    if (!jobs_.contains(restored->job_id())) {
      v1::CreateJobResponse resp;
      resp.set_created(true);
      resp.set_range_begin(restored->range().begin);
      resp.set_range_end(restored->range().end);
      resp.set_step(manifest.step);
      TESSEL_LOG(INFO) << "restored job '" << req.spec().job() << "' shard " << req.shard_index()
                       << " from the checkpoint of step " << manifest.step << " ("
                       << manifest.num_shards << " shards then, " << req.spec().num_shards()
                       << " now)";
      jobs_[restored->job_id()] = std::move(restored);
      return resp;
    }
  }
  TESSEL_ASSIGN_OR_RETURN(auto job,
                          ShardJob::Create(req.spec(), req.shard_index(), req.epoch(), memory_));
  job->set_fold_prefix(fold_prefix_);
  job->SetCreator(creator);
  absl::MutexLock lock(&mu_);
  v1::CreateJobResponse resp;
  auto it = jobs_.find(job->job_id());
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
      // Another CreateJob may have moved it further meanwhile: then this
      // older epoch is refused, and the newer one stands.
      if (absl::Status s = have.SetEpoch(req.epoch()); !s.ok()) {
        TESSEL_LOG(INFO) << "CreateJob of '" << req.spec().job() << "': " << s.message();
      }
    }
    resp.set_created(false);
    resp.set_range_begin(have.range().begin);
    resp.set_range_end(have.range().end);
    resp.set_step(have.version());
    return resp;
  }
  resp.set_created(true);
  resp.set_range_begin(job->range().begin);
  resp.set_range_end(job->range().end);
  resp.set_step(0);
  TESSEL_LOG(INFO) << "created job '" << req.spec().job() << "' shard " << req.shard_index()
                   << " range [" << resp.range_begin() << ", " << resp.range_end() << ") "
                   << StrategyName(req.spec().strategy()) << " world " << req.spec().world_size()
                   << " epoch " << req.epoch();
  jobs_[job->job_id()] = std::move(job);
  return resp;
}

absl::StatusOr<v1::CreateJobResponse> JobTable::ReplaceJob(const v1::CreateJobRequest& req,
                                                           const std::string& creator) {
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
  std::string recorded;  // the checkpoint's creator, else the replaced job's
  if (ddp) {
    TESSEL_ASSIGN_OR_RETURN(job,
                            ShardJob::Create(req.spec(), req.shard_index(), req.epoch(), memory_));
    job->StartAt(step);
  } else {
    TESSEL_ASSIGN_OR_RETURN(auto manifest, checkpointer_->Read(name, step));
    from_shards = manifest.num_shards;
    recorded = manifest.creator;
    TESSEL_ASSIGN_OR_RETURN(job, ShardJob::Restore(req.spec(), req.shard_index(), req.epoch(),
                                                   manifest, checkpointer_, memory_));
  }
  if (std::shared_ptr<ShardJob> have = FindJob(name); recorded.empty() && have != nullptr) {
    recorded = have->creator();
  }
  job->SetCreator(recorded.empty() ? creator : recorded);
  job->SetWorkerIds({req.worker_ids().begin(), req.worker_ids().end()});
  job->set_fold_prefix(fold_prefix_);
  std::shared_ptr<ShardJob> replaced;
  v1::CreateJobResponse resp;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job->job_id());
    int64_t dropped_step = -1;
    if (it != jobs_.end()) {
      replaced = it->second;
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
    resp = respond(*job, true);
    jobs_[job->job_id()] = std::move(job);
    const int dropped = checkpointer_->Forget(name, step);
    if (dropped > 0) {
      TESSEL_LOG(INFO) << "recovery: dropped " << dropped << " queued checkpoint write(s) of job '"
                       << name << "' past step " << step;
    }
  }
  if (replaced != nullptr) {
    const std::vector<ShardJob::Puller> waiting = replaced->TakeWaitingPulls();
    absl::MutexLock lock(&listener_mu_);
    if (replaced_ && !waiting.empty()) replaced_(*replaced, waiting);
  }
  return resp;
}

void JobTable::SetReplacedListener(ReplacedListener listener) {
  absl::MutexLock lock(&listener_mu_);
  replaced_ = std::move(listener);
}

absl::StatusOr<v1::SaveCheckpointResponse> JobTable::SaveCheckpoint(
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
  TESSEL_ASSIGN_OR_RETURN(auto snapshot, job->RequestCheckpoint(req.step(), req.cancel()));
  if (snapshot.has_value()) {
    resp.set_immediate(true);
    TESSEL_RETURN_IF_ERROR(checkpointer_->Submit(std::move(*snapshot), /*wait=*/false));
  }
  return resp;
}

absl::Status JobTable::DeleteJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(JobId(job));
  if (it == jobs_.end() || it->second->spec().job() != job) {
    return absl::NotFoundError(absl::StrCat("no job '", job, "' on this server"));
  }
  jobs_.erase(it);
  return absl::OkStatus();
}

std::shared_ptr<ShardJob> JobTable::FindJob(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(JobId(job));
  if (it == jobs_.end() || it->second->spec().job() != job) return nullptr;
  return it->second;
}

std::shared_ptr<ShardJob> JobTable::FindById(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ShardJob>> JobTable::Jobs() {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ShardJob>> out;
  for (auto& [id, job] : jobs_) out.push_back(job);
  return out;
}

}  // namespace tessel
