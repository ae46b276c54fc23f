#include "server/frame_keys.h"

namespace tessel {

std::shared_ptr<FrameAuth> FrameKeys::For(uint64_t job_id, int32_t shard) {
  if (!enabled_) return nullptr;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<FrameAuth>& auth = auth_[job_id];
  if (auth == nullptr || auth->shard() != shard) {
    auth = *FrameAuth::Create(NewJobSecret(), job_id, shard);  // a secret of the right size
  }
  return auth;
}

std::shared_ptr<FrameAuth> FrameKeys::Find(uint64_t job_id) {
  if (!enabled_) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = auth_.find(job_id);
  return it == auth_.end() ? nullptr : it->second;
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
