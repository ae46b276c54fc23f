// RemoteKeyCache: the receiver's side of in-place payloads. Peers' payload
// regions, unpacked from a descriptor's packed key (and mapped here where a
// shared-memory transport allows) once per (sender endpoint, region), kept
// for the next descriptor of the same region, and the borrows of payloads
// read through them.
//
// Bounds, so a peer that went away does not keep its memory mapped here for
// as long as this process lives: at most kKeysPerEndpoint keys per endpoint
// (the least recently used unborrowed one goes first: a sender that frees and
// allocates payload memory job after job leaves stale regions behind), and
// keys unused for kKeyIdle are dropped (checked at most once a second, on
// Get). A borrowed key is never dropped.
//
// Reset: RetireWorker(w) drops every unborrowed key (their rkeys go before
// their worker) and retires the borrowed ones; the worker is then kept until
// the last borrow through it ends, and destroyed by the cache.
//
// The cache calls no UCX function itself: RemoteKeyOps does (unpack, map,
// destroy), so its bookkeeping is tested with fakes. Handles are opaque
// pointers (ucp_ep_h, ucp_worker_h, ucp_rkey_h).
//
// Threads: not thread-safe; the UCX transport's progress thread owns it
// (Shutdown's thread once the progress thread is gone).
//
// Example:
//   RemoteKeyCache keys(std::make_unique<UcpRemoteKeyOps>());
//   absl::StatusOr<RemoteKey*> key =
//       keys.Get(ep, worker, region, packed, base, region_bytes, absl::Now());
//   if (key.ok() && (*key)->mapped != nullptr) read((*key)->mapped + offset);
//   keys.Borrow(from, lease, *key);  ...  keys.EndBorrow(from, lease, &tell_sender);
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_REMOTE_KEY_CACHE_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_REMOTE_KEY_CACHE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/transport.h"

namespace tessel {
namespace ucx_internal {

// Keys kept per sender endpoint, and how long an unused one stays.
inline constexpr int kKeysPerEndpoint = 16;
inline constexpr absl::Duration kKeyIdle = absl::Seconds(30);

// What the cache asks of UCX (UcpRemoteKeyOps, ucx_transport.cc), or of a
// test's fake.
class RemoteKeyOps {
 public:
  virtual ~RemoteKeyOps() = default;
  // The key `packed` describes, unpacked on endpoint `ep`, or UCX's error.
  virtual absl::StatusOr<void*> Unpack(void* ep, absl::Span<const uint8_t> packed) = 0;
  // Where `remote_base` of `rkey`'s region is mapped here; nullptr if it
  // cannot be (another host, no shared-memory transport in common).
  virtual char* Map(void* rkey, uint64_t remote_base) = 0;
  // Destroys an unpacked key (and unmaps what Map mapped).
  virtual void Destroy(void* rkey) = 0;
  // Destroys a retired UCX worker once its last borrowed key is gone.
  virtual void DestroyWorker(void* worker) = 0;
};

// A peer's region, unpacked here.
struct RemoteKey {
  void* rkey = nullptr;
  void* ep = nullptr;      // unpacked on it (it keys the cache)
  void* worker = nullptr;  // the worker `ep` belongs to
  uint64_t region = 0;
  uint64_t remote_base = 0;
  uint64_t region_bytes = 0;  // as first described (descriptor_codec.h)
  char* mapped = nullptr;     // where remote_base is mapped here; null: not mappable
  int borrows = 0;            // borrowed payloads read through it
  absl::Time used_at;         // last descriptor (least recently used goes first)
  bool retired = false;       // out of the cache: its worker was reset
};

class RemoteKeyCache {
 public:
  explicit RemoteKeyCache(std::unique_ptr<RemoteKeyOps> ops) : ops_(std::move(ops)) {}
  ~RemoteKeyCache();  // Clear()
  RemoteKeyCache(const RemoteKeyCache&) = delete;
  RemoteKeyCache& operator=(const RemoteKeyCache&) = delete;

  // The key of (`ep`, `region`): cached, or unpacked from `packed` (on
  // `ep`, of `worker`) and mapped. The error is Unpack's, or
  // InvalidArgument when a cached region is now described with another
  // base or size (a region's id is never reused, so the sender lies; the
  // caller drops the descriptor). The pointer stays valid until the key is
  // dropped: while borrowed, at least.
  absl::StatusOr<RemoteKey*> Get(void* ep, void* worker, uint64_t region,
                                 absl::Span<const uint8_t> packed, uint64_t remote_base,
                                 uint64_t region_bytes, absl::Time now);

  // The receiver borrows payload (from, lease), which lies in `key`.
  // (from, lease) must not be borrowed already: check IsBorrowed first.
  void Borrow(PeerId from, uint64_t lease, RemoteKey* key);
  // Whether (from, lease) is borrowed now: a descriptor that names a lease
  // its peer already lent is a replay, dropped before anyone reads it (a
  // second borrow would lose the first, pinning its key for good).
  bool IsBorrowed(PeerId from, uint64_t lease) const;
  // Ends borrow (from, lease); false if there is none. *tell_sender: the
  // key's worker is still current, so the sender can be sent its RELEASE.
  bool EndBorrow(PeerId from, uint64_t lease, bool* tell_sender);

  // `worker` is going: its unborrowed keys go now, borrowed ones retire.
  // True if borrows keep it: the cache destroys it (RemoteKeyOps) after the
  // last one ends, and the caller must not. False: destroy it now.
  bool RetireWorker(void* worker);

  // Ends every borrow (their readers must have stopped), drops every key and
  // destroys every retired worker. Keys go before their workers.
  void Clear();

  size_t size() const { return keys_.size(); }  // cached keys, for tests

 private:
  void Drop(RemoteKey* key);      // destroys the rkey and frees `key`
  void Unborrow(RemoteKey* key);  // one borrow of `key` ended
  void Sweep(absl::Time now);     // drops idle unborrowed keys

  const std::unique_ptr<RemoteKeyOps> ops_;
  absl::flat_hash_map<std::pair<void*, uint64_t>, RemoteKey*> keys_;       // by (ep, region)
  absl::flat_hash_map<std::pair<PeerId, uint64_t>, RemoteKey*> borrowed_;  // by (from, lease)
  // Reset workers kept for borrows, with how many of their keys are still
  // borrowed.
  absl::flat_hash_map<void*, int> retired_workers_;
  absl::Time last_sweep_ = absl::InfinitePast();
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_REMOTE_KEY_CACHE_H_
