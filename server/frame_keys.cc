#include "server/frame_keys.h"

#include "absl/strings/str_cat.h"

namespace tessel {

std::shared_ptr<JobFrameKeys> FrameKeys::For(uint64_t job_id, int32_t shard) {
  if (!enabled_) return nullptr;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<JobFrameKeys>& keys = keys_[job_id];
  if (keys == nullptr || keys->shard() != shard) {
    // A secret of the right size.
    keys = *JobFrameKeys::Create(NewJobSecret(), job_id, shard, payload_);
  }
  return keys;
}

std::shared_ptr<JobFrameKeys> FrameKeys::Find(uint64_t job_id) {
  if (!enabled_) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(job_id);
  return it == keys_.end() ? nullptr : it->second;
}

absl::Status FrameKeys::Claim(uint64_t job_id, int32_t rank, int64_t epoch,
                              const std::string& claim, const std::shared_ptr<const void>& job) {
  absl::MutexLock lock(&mu_);
  Grant& g = grants_[{job_id, rank}];
  const std::shared_ptr<const void> granted_job = g.job.lock();
  const bool same_job = granted_job != nullptr && granted_job == job;
  if (same_job && g.epoch == epoch && !g.claim.empty()) {
    if (g.claim == claim) return absl::OkStatus();  // the same worker asking again
    return absl::PermissionDeniedError(absl::StrCat(
        "rank ", rank, "'s frame key of epoch ", epoch,
        " was already given to another worker process; a rank's key goes to one process per "
        "epoch (a recovery makes a new epoch). If no other worker runs as rank ",
        rank, ", another member of the job asked for it: check the job's workers"));
  }
  if (same_job && epoch < g.epoch) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank, "'s frame key of epoch ",
                                                      epoch, " is stale: epoch ", g.epoch,
                                                      " was granted already"));
  }
  g.epoch = epoch;
  g.claim = claim;
  g.job = job;
  return absl::OkStatus();
}

std::string FrameKeys::MeshSecret(const std::string& group, const std::string& keep) {
  if (!enabled_) return "";
  absl::MutexLock lock(&mu_);
  std::string& secret = mesh_[group];
  if (!keep.empty()) secret = keep;
  if (secret.empty()) secret = NewJobSecret();
  return secret;
}

}  // namespace tessel
