#include "server/frame_keys.h"

#include "absl/strings/str_cat.h"
#include "runtime/log.h"

namespace tessel {

std::shared_ptr<JobFrameKeys> FrameKeys::For(uint64_t job_id, int32_t shard) {
  if (!enabled_) return nullptr;
  return ClaimsOf(job_id, shard);
}

std::shared_ptr<JobFrameKeys> FrameKeys::ClaimsOf(uint64_t job_id, int32_t shard) {
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

namespace {

// A refused claim of (c.rank, c.epoch): the rule, and `why` this claim is
// not a handover.
absl::Status Refused(const FrameKeyClaim& c, absl::string_view why) {
  return absl::PermissionDeniedError(absl::StrCat(
      "rank ", c.rank, "'s frame key of epoch ", c.epoch,
      " was already given to another worker process; a rank's key goes to one process per "
      "epoch (a recovery makes a new epoch), or to the process the registry holds as rank ",
      c.rank, "'s worker once the one holding it is no longer that (a replacement): ", why,
      ". If no other worker runs as rank ", c.rank,
      ", another member of the job asked for it: check the job's workers"));
}

}  // namespace

absl::StatusOr<int32_t> FrameKeys::Claim(JobFrameKeys& keys, const FrameKeyClaim& c,
                                         const std::shared_ptr<const void>& job,
                                         const RankHolder& holder, bool* handed_over) {
  bool handover = false;
  if (handed_over == nullptr) handed_over = &handover;
  *handed_over = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto decided = Decide(keys, c, job, nullptr, handed_over)) return *std::move(decided);
  }
  // A conflicting claim that may be a handover: the registry decides, asked
  // without the lock (an RPC). Whatever changed meanwhile is decided anew.
  const absl::StatusOr<int64_t> registered = holder ? holder() : absl::StatusOr<int64_t>(0);
  absl::MutexLock lock(&mu_);
  return *Decide(keys, c, job, &registered, handed_over);
}

std::optional<absl::StatusOr<int32_t>> FrameKeys::Decide(JobFrameKeys& keys, const FrameKeyClaim& c,
                                                         const std::shared_ptr<const void>& job,
                                                         const absl::StatusOr<int64_t>* registered,
                                                         bool* handed_over) {
  Grant& g = grants_[{keys.job_id(), c.rank}];
  const std::shared_ptr<const void> granted_job = g.job.lock();
  const bool same_job = granted_job != nullptr && granted_job == job;
  if (same_job && g.epoch == c.epoch && !g.claim.empty()) {
    // The same worker asking again (a retry; 0: it names no membership).
    if (g.claim == c.claim && (c.member_epoch == 0 || c.member_epoch == g.member_epoch)) {
      return keys.Generation(c.rank, c.epoch);
    }
    // Another process, or this one under a newer membership (it lapsed and
    // joined again: that is a new membership too, which keeps nothing of the
    // old one's keys).
    if (c.member_epoch == 0) {
      return Refused(c,
                     "this claim names no registry membership (a worker from before "
                     "handovers) and never takes a rank over");
    }
    if (registered == nullptr) return std::nullopt;  // ask the registry
    if (!registered->ok()) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", c.rank, "'s frame key of epoch ", c.epoch,
          " is held by another worker process, and whether this one replaces it cannot be told "
          "now: the registry did not answer (",
          registered->status().message(), "); try again"));
    }
    const int64_t now = **registered;
    if (now == 0) return Refused(c, "the registry holds no worker for the rank now");
    if (now != c.member_epoch) {
      return Refused(c, absl::StrCat("the registry's worker for the rank joined at epoch ", now,
                                     ", and this claim's process at epoch ", c.member_epoch,
                                     ": it is not the registered worker"));
    }
    if (now == g.member_epoch) {
      return Refused(c, absl::StrCat("the process holding it is the registered worker (joined at "
                                     "epoch ",
                                     now, ")"));
    }
    // A handover: the next generation's keys, to this claim only.
    const int32_t next = keys.Generation(c.rank, c.epoch) + 1;
    keys.SetGeneration(c.rank, c.epoch, next);
    const int64_t handovers = ++handovers_[keys.job_id()];
    TESSEL_LOG(INFO) << "job '" << c.job << "' shard " << keys.shard() << ": rank " << c.rank
                     << "'s frame keys of epoch " << c.epoch
                     << " handed over from the registry membership that began at epoch "
                     << g.member_epoch << " to the rank's registered worker's (epoch "
                     << c.member_epoch << (g.claim == c.claim ? ", the same process" : "") << "); "
                     << (enabled_ ? "frames under the earlier keys are refused from now on"
                                  : "frames go untagged (--data_auth off): nothing is fenced")
                     << " (" << handovers << " handover(s) of the job on this server)";
    g.claim = c.claim;
    g.member_epoch = c.member_epoch;
    *handed_over = true;
    return next;
  }
  if (same_job && c.epoch < g.epoch) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", c.rank, "'s frame key of epoch ",
                                                      c.epoch, " is stale: epoch ", g.epoch,
                                                      " was granted already"));
  }
  g.epoch = c.epoch;
  g.claim = c.claim;
  g.member_epoch = c.member_epoch;
  g.job = job;
  return keys.Generation(c.rank, c.epoch);
}

int64_t FrameKeys::handovers(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  auto it = handovers_.find(job_id);
  return it == handovers_.end() ? 0 : it->second;
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
