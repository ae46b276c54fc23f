// FrameKeys: the data-path frame authentication of a shard server's jobs
// (runtime/frame_auth.h, docs/security.md). When on, each job gets a secret of
// its own the first time it is asked for (a frame of it arrives, a worker
// asks GetFrameKey), and every frame of the job must carry a tag made with
// it; the job's workers get the secret from GetFrameKey, over the
// authenticated control plane. Off: no job has one and frames go untagged.
//
// Threads: any.
//
// Example:
//   FrameKeys keys(/*enabled=*/true);
//   std::shared_ptr<FrameAuth> auth = keys.For(job.job_id(), job.shard());
#ifndef TESSEL_SERVER_FRAME_KEYS_H_
#define TESSEL_SERVER_FRAME_KEYS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "runtime/frame_auth.h"

namespace tessel {

class FrameKeys {
 public:
  explicit FrameKeys(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // The job's authentication, made (with a new secret) on first use;
  // nullptr when off.
  std::shared_ptr<FrameAuth> For(uint64_t job_id, int32_t shard);
  // The job's authentication if it has one yet; nullptr otherwise.
  std::shared_ptr<FrameAuth> Find(uint64_t job_id);
  // The secret of a hybrid job's worker-to-worker mesh (`group`, e.g.
  // "mlp.mesh"): `keep` if not empty (the secret a running mesh holds, which
  // this server may have lost by restarting), otherwise the one it holds,
  // made on the first ask. The mesh's members all fetch it from shard 0
  // (worker/hybrid.h). "" when off. This server never checks mesh messages;
  // it only keeps and hands out the secret.
  std::string MeshSecret(const std::string& group, const std::string& keep = "");

 private:
  const bool enabled_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<FrameAuth>> auth_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> mesh_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FRAME_KEYS_H_
