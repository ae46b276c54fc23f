// FrameKeys: the data-path frame authentication of a shard server's jobs
// (runtime/rank_keys.h, docs/security.md). When on, each job gets a secret of
// its own the first time it is asked for (a frame of it arrives, a worker
// asks GetFrameKey), and every frame of the job must carry a tag under a key
// derived from it for the frame's rank, epoch and direction. A worker gets
// only its own rank's secret for the epoch (GetFrameKey), and only if it is
// the first to claim that (rank, epoch) here (Claim), or the replacement of
// the process that claimed it, as the registry says (a handover, below).
// Off: no job has one and
// frames go untagged. With payload tags on (--data_integrity=payload), every
// job's frames also carry a tag of their payload (runtime/rank_keys.h), and
// GetFrameKey answers kPayloadKeysVersion, so the whole job agrees.
//
// Threads: any.
//
// Handover (issue 44: a dead worker's replacement rejoins the step in
// flight at the same epoch): a claim of (rank r, epoch E) other than the
// one granted is granted iff the registry says its process is the worker
// registered for r now and the granted one's is not. Each claim names the
// registry membership of its process (`member_epoch`: the joined_epoch the
// registry gave it); on a conflicting claim the server asks the registry
// for the member registered as r's worker now (`RankHolder`), and hands
// over iff that member exists, began at the new claim's member_epoch, and
// not at the granted claim's (the earlier process's membership ended: it
// lapsed or left; a process that lapsed and joined again has a new
// membership too, and its own claim under it is taken as a new claim: it
// gets new keys if it is the registered worker, else nothing). A claim with
// member_epoch 0 (a worker from before
// handovers) never takes a rank over; the registry unreachable: Unavailable,
// never a grant. A handover moves (r, E) to its next generation of keys
// (runtime/rank_keys.h): the replacement gets the new secret, frames under
// the old keys stop verifying (the earlier process, if it was only stalled,
// is fenced), the server seals toward r under the new down key, and the
// data plane binds r to the endpoint of its first frame under the new keys
// (DataPlane's RankEndpoints: the generation a frame verified under). Host
// groups' secrets and a hybrid job's mesh secret are not handed over or
// changed: an in-place rejoin is refused for jobs with host aggregation and
// for hybrid jobs (the replacement would share the group's, or the mesh's,
// secret with the process it replaces).
//
// Example:
//   FrameKeys keys(/*enabled=*/true);
//   std::shared_ptr<JobFrameKeys> job_keys = keys.For(job.job_id(), job.shard());
//   absl::StatusOr<int32_t> generation = keys.Claim(
//       *job_keys, {"mlp", rank, epoch, claim, member_epoch}, job_ptr, holder);
//   std::string secret = job_keys->RankSecret(rank, epoch, *generation);
#ifndef TESSEL_SERVER_FRAME_KEYS_H_
#define TESSEL_SERVER_FRAME_KEYS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"

namespace tessel {

// A claim is a random value a worker process makes once and sends with every
// GetFrameKey (its identity toward the grants below): 16 to 64 bytes.
inline constexpr size_t kMinFrameKeyClaimBytes = 16;
inline constexpr size_t kMaxFrameKeyClaimBytes = 64;

// One GetFrameKey's claim of a rank's keys.
struct FrameKeyClaim {
  std::string job;  // the job's name, for messages
  int32_t rank = 0;
  int64_t epoch = 0;
  std::string claim;         // the process's random claim
  int64_t member_epoch = 0;  // its registry membership's joined_epoch; 0: not said
};

// The joined_epoch of the worker the registry holds for a rank now, 0 when
// it holds none; an error when the registry cannot be asked.
using RankHolder = std::function<absl::StatusOr<int64_t>()>;

class FrameKeys {
 public:
  // `payload`: payloads are tagged too (only with `enabled`).
  explicit FrameKeys(bool enabled, bool payload = false)
      : enabled_(enabled), payload_(enabled && payload) {}

  bool enabled() const { return enabled_; }
  bool payload() const { return payload_; }
  // The job's keys, made (with a new secret) on first use; nullptr when off.
  std::shared_ptr<JobFrameKeys> For(uint64_t job_id, int32_t shard);
  // The job's keys if it has them yet; nullptr otherwise.
  std::shared_ptr<JobFrameKeys> Find(uint64_t job_id);
  // What Claim keeps a job's grants with: For() when on. Off, frames go
  // untagged and no key is handed out, but the claims are still decided, so
  // a rank's replacement is still told apart from a retry (the shard then
  // abandons what the earlier process left unfinished): keys made only for
  // that bookkeeping, never used to seal or verify, and never returned by
  // For() or Find().
  std::shared_ptr<JobFrameKeys> ClaimsOf(uint64_t job_id, int32_t shard);
  // Grants (c.rank, c.epoch) of the job instance `job` (any object that
  // lives as long as the job does on this server) whose keys are `keys` to
  // c.claim, and returns the generation of the keys granted (the secret is
  // keys.RankSecret(rank, epoch, generation)): for the first claim, and for
  // the same claim again with the same member_epoch or 0 (a retried RPC, a
  // worker re-taking its own restore), the current one; for another claim
  // of the same (rank, epoch) of the same job instance, or the same claim
  // under another membership (its process lapsed and joined again), the
  // next one if it is a handover (the file comment; `holder`
  // is asked, without this object's lock, only then; null: no registry, no
  // handover), else PermissionDenied naming the rank (Unavailable when
  // `holder` fails). FailedPrecondition for an epoch older than the one
  // granted. A newer epoch, or a job recreated under the same name, starts
  // over. `handed_over` (if not null): whether this call made a handover
  // (false for a first claim, a retry, a new epoch, a refusal), so the
  // caller can abandon what the earlier process left unfinished
  // (ShardJob::AbandonReceives).
  absl::StatusOr<int32_t> Claim(JobFrameKeys& keys, const FrameKeyClaim& c,
                                const std::shared_ptr<const void>& job,
                                const RankHolder& holder = nullptr, bool* handed_over = nullptr);
  // Handovers granted for the job (by id) over this server's life.
  int64_t handovers(uint64_t job_id);
  // The secret of a hybrid job's worker-to-worker mesh (`group`, e.g.
  // "mlp.mesh"): `keep` if not empty (the secret a running mesh holds, which
  // this server may have lost by restarting), otherwise the one it holds,
  // made on the first ask. The mesh's members all fetch it from shard 0
  // (worker/hybrid.h). "" when off. This server never checks mesh messages;
  // it only keeps and hands out the secret.
  std::string MeshSecret(const std::string& group, const std::string& keep = "");

 private:
  struct Grant {
    int64_t epoch = 0;
    std::string claim;
    int64_t member_epoch = 0;  // the claim's
    std::weak_ptr<const void> job;
  };
  // Claim's decision under the lock: the generation granted, an error, or
  // (nullopt) a conflicting claim that needs the registry's answer, which
  // `registered` is once asked.
  std::optional<absl::StatusOr<int32_t>> Decide(JobFrameKeys& keys, const FrameKeyClaim& c,
                                                const std::shared_ptr<const void>& job,
                                                const absl::StatusOr<int64_t>* registered,
                                                bool* handed_over)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const bool enabled_;
  const bool payload_;
  absl::Mutex mu_;
  // By job id: its keys (on), or its claims' bookkeeping (off: ClaimsOf).
  absl::flat_hash_map<uint64_t, std::shared_ptr<JobFrameKeys>> keys_ ABSL_GUARDED_BY(mu_);
  // (job id, rank) -> the grant of its newest epoch.
  absl::flat_hash_map<std::pair<uint64_t, int32_t>, Grant> grants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> mesh_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, int64_t> handovers_ ABSL_GUARDED_BY(mu_);  // by job id
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FRAME_KEYS_H_
