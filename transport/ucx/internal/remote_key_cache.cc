#include "transport/ucx/internal/remote_key_cache.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {
namespace ucx_internal {

RemoteKeyCache::~RemoteKeyCache() { Clear(); }

void RemoteKeyCache::Drop(RemoteKey* key) {
  if (key->rkey != nullptr) ops_->Destroy(key->rkey);
  delete key;
}

void RemoteKeyCache::Sweep(absl::Time now) {
  if (now - last_sweep_ <= absl::Seconds(1)) return;
  last_sweep_ = now;
  for (auto k = keys_.begin(); k != keys_.end();) {
    RemoteKey* key = k->second;
    if (key->borrows == 0 && now - key->used_at > kKeyIdle) {
      Drop(key);
      keys_.erase(k++);
    } else {
      ++k;
    }
  }
}

absl::StatusOr<RemoteKey*> RemoteKeyCache::Get(void* ep, void* worker, uint64_t region,
                                               absl::Span<const uint8_t> packed,
                                               uint64_t remote_base, uint64_t region_bytes,
                                               absl::Time now) {
  auto it = keys_.find({ep, region});
  if (it != keys_.end() &&
      (it->second->remote_base != remote_base || it->second->region_bytes != region_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload region ", region, " was described as ", it->second->region_bytes,
                     " bytes at 0x", absl::Hex(it->second->remote_base), " and now as ",
                     region_bytes, " bytes at 0x", absl::Hex(remote_base)));
  }
  if (it != keys_.end()) {
    it->second->used_at = now;
    RemoteKey* key = it->second;
    Sweep(now);  // used just now: not swept
    return key;
  }
  Sweep(now);
  TESSEL_ASSIGN_OR_RETURN(void* rkey, ops_->Unpack(ep, packed));
  auto* key = new RemoteKey;
  key->rkey = rkey;
  key->ep = ep;
  key->worker = worker;
  key->region = region;
  key->remote_base = remote_base;
  key->region_bytes = region_bytes;
  key->used_at = now;
  key->mapped = ops_->Map(rkey, remote_base);
  int same_ep = 0;
  RemoteKey* oldest = nullptr;
  for (auto& [where, k] : keys_) {
    if (where.first != ep) continue;
    ++same_ep;
    if (k->borrows == 0 && (oldest == nullptr || k->used_at < oldest->used_at)) oldest = k;
  }
  if (same_ep >= kKeysPerEndpoint && oldest != nullptr) {
    keys_.erase({oldest->ep, oldest->region});
    Drop(oldest);
  }
  keys_[{ep, region}] = key;
  return key;
}

bool RemoteKeyCache::IsBorrowed(PeerId from, uint64_t lease) const {
  return borrowed_.count({from, lease}) > 0;
}

void RemoteKeyCache::Borrow(PeerId from, uint64_t lease, RemoteKey* key) {
  ++key->borrows;
  borrowed_[{from, lease}] = key;
}

void RemoteKeyCache::Unborrow(RemoteKey* key) {
  if (--key->borrows > 0 || !key->retired) return;
  void* worker = key->worker;
  Drop(key);
  auto it = retired_workers_.find(worker);
  if (it != retired_workers_.end() && --it->second == 0) {
    ops_->DestroyWorker(worker);
    retired_workers_.erase(it);
  }
}

bool RemoteKeyCache::EndBorrow(PeerId from, uint64_t lease, bool* tell_sender) {
  auto it = borrowed_.find({from, lease});
  if (it == borrowed_.end()) return false;
  RemoteKey* key = it->second;
  borrowed_.erase(it);
  *tell_sender = !key->retired;
  Unborrow(key);
  return true;
}

bool RemoteKeyCache::RetireWorker(void* worker) {
  int kept = 0;
  for (auto k = keys_.begin(); k != keys_.end();) {
    RemoteKey* key = k->second;
    if (key->worker != worker) {
      ++k;
      continue;
    }
    if (key->borrows > 0) {
      key->retired = true;
      ++kept;
    } else {
      Drop(key);
    }
    keys_.erase(k++);
  }
  if (kept > 0) retired_workers_[worker] += kept;
  return kept > 0;
}

void RemoteKeyCache::Clear() {
  // Borrowed keys first (they may be retired, out of keys_), then the rest,
  // then the workers kept for them.
  for (auto& [where, key] : borrowed_) {
    if (--key->borrows == 0 && key->retired) Drop(key);
  }
  borrowed_.clear();
  for (auto& [where, key] : keys_) Drop(key);
  keys_.clear();
  for (auto& [worker, n] : retired_workers_) ops_->DestroyWorker(worker);
  retired_workers_.clear();
}

}  // namespace ucx_internal
}  // namespace tessel
