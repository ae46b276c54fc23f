// FrameKeys: the data-path frame authentication of a shard server's jobs
// (runtime/rank_keys.h, docs/security.md). When on, each job gets a secret of
// its own the first time it is asked for (a frame of it arrives, a worker
// asks GetFrameKey), and every frame of the job must carry a tag under a key
// derived from it for the frame's rank, epoch and direction. A worker gets
// only its own rank's secret for the epoch (GetFrameKey), and only if it is
// the first to claim that (rank, epoch) here (Claim). Off: no job has one and
// frames go untagged. With payload tags on (--data_integrity=payload), every
// job's frames also carry a tag of their payload (runtime/rank_keys.h), and
// GetFrameKey answers kPayloadKeysVersion, so the whole job agrees.
//
// Threads: any.
//
// Example:
//   FrameKeys keys(/*enabled=*/true);
//   std::shared_ptr<JobFrameKeys> job_keys = keys.For(job.job_id(), job.shard());
//   absl::Status mine = keys.Claim(job.job_id(), rank, epoch, claim, job_ptr);
#ifndef TESSEL_SERVER_FRAME_KEYS_H_
#define TESSEL_SERVER_FRAME_KEYS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"

namespace tessel {

// A claim is a random value a worker process makes once and sends with every
// GetFrameKey (its identity toward the grants below): 16 to 64 bytes.
inline constexpr size_t kMinFrameKeyClaimBytes = 16;
inline constexpr size_t kMaxFrameKeyClaimBytes = 64;

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
  // Grants (rank, epoch) of the job instance `job` (any object that lives as
  // long as the job does on this server) to `claim`: OK for the first claim
  // and for the same claim again (a retried RPC, a worker re-taking its own
  // restore); PermissionDenied naming the rank for any other claim of the
  // same (rank, epoch) of the same job instance. A newer epoch, or a job
  // recreated under the same name, starts over.
  absl::Status Claim(uint64_t job_id, int32_t rank, int64_t epoch, const std::string& claim,
                     const std::shared_ptr<const void>& job);
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
    std::weak_ptr<const void> job;
  };
  const bool enabled_;
  const bool payload_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<JobFrameKeys>> keys_ ABSL_GUARDED_BY(mu_);
  // (job id, rank) -> the grant of its newest epoch.
  absl::flat_hash_map<std::pair<uint64_t, int32_t>, Grant> grants_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> mesh_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FRAME_KEYS_H_
