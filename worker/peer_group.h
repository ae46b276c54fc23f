// PeerGroup: worker-to-worker messages between the ranks of one job, for
// model parallelism (tensor-parallel sums, pipeline activations and their
// gradients). The shard servers are not involved.
//
// Each rank owns one PeerGroup over its own Transport endpoint (UCX between
// processes, the in-process backend in tests: the same code runs over both,
// checked by one conformance suite). Messages are bytes (or, typed, floats)
// sent to a peer rank under a 64-bit tag; the receiver asks for (peer, tag)
// and gets the message whenever it arrives, before or after the ask. (peer, tag) must be
// unique among the messages in flight from that peer: callers build tags from
// (kind, step, micro-batch, layer), see worker/hybrid.h.
//
// Collectives over a group (all-reduce, all-gather, broadcast, barrier) are
// worker/collectives.h's; this class moves messages only.
//
// Every wait has a deadline (PeerGroupOptions::timeout) and, on expiry, a
// DeadlineExceeded status naming this rank, the peer (through
// PeerGroupOptions::describe) and what was awaited (the caller's `what`, e.g.
// "activation of step 3 micro-batch 2 from stage 0"). A blocked wait also
// runs the health check (SetHealthCheck, e.g. "has a member left the
// registry group?") every PeerGroupOptions::health_period, so a dead peer
// ends it within seconds instead of at the deadline.
//
// Wire: each message is a 48-byte header (magic "TPG1", version, a hash of
// the group name, sender rank, generation, tag, payload bytes; little-endian;
// worker/peer_message.h) plus the payload. Messages from another group, with a bad header or a
// sender outside the group, whose payload is not the size their header says, or larger than the
// options' bounds, are refused and logged; a second message for a (peer, tag) that is still
// unclaimed fails the group (a tag reuse is a bug).
//
// Authentication (SetAuth, e.g. a hybrid job's mesh key from its shard
// servers): every header then goes out with a 16-byte tag, the group key's
// SipHash of the 48 header bytes under the key of the message's generation
// (runtime/frame_auth.h); a message without a valid tag is dropped before it
// can take a (peer, tag) slot, counted (refused_unauthenticated()) and
// logged at most once per 10 s. A Reset to a new epoch changes the key, and
// the generation's round is among the tagged bytes, so a message of an older
// generation cannot be re-stamped.
//
// Threads: Send, Recv and Flush may be called from any thread (collectives
// built on them must be issued in the same order on every member). The transport's
// progress thread runs the receive handler, which only stores messages.
//
// Example:
//   PeerGroup group(std::move(transport), rank, size, {.name = "job.mesh"});
//   std::vector<std::string> addresses = ...;  // e.g. JoinMesh(), below
//   TESSEL_RETURN_IF_ERROR(group.Connect(addresses));
//   TESSEL_RETURN_IF_ERROR(group.Send(rank + 1, tag, activations));
//   auto grad = group.Recv(rank + 1, grad_tag, "gradient of micro-batch 0");
//   TESSEL_RETURN_IF_ERROR(group.SendBytes(0, hello_tag, "config text"));
#ifndef TESSEL_WORKER_PEER_GROUP_H_
#define TESSEL_WORKER_PEER_GROUP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/transport.h"
#include "worker/peer_message.h"

namespace tessel {

class RegistryClient;  // rpc/registry_client.h
class FrameAuth;       // runtime/frame_auth.h
namespace metrics {
class Counter;  // runtime/metrics.h
}

// PeerGroupOptions' default bounds (issue 42).
inline constexpr uint64_t kDefaultMaxPeerMessageBytes = uint64_t{256} << 20;
inline constexpr uint64_t kDefaultMaxPeerInboxBytes = uint64_t{1} << 30;

struct PeerGroupOptions {
  // Group name; messages carry its hash, so two groups never mix.
  std::string name = "mesh";
  // Deadline of every wait (Recv, RecvBytes, Flush, and the collectives on top).
  absl::Duration timeout = absl::Seconds(120);
  // How a rank is named in messages, e.g. "rank 3 (d1 p0 t1)"; default "rank 3".
  std::function<std::string(int rank)> describe;
  // How often a blocked wait runs the health check.
  absl::Duration health_period = absl::Milliseconds(250);
  // Bounds on what peers can make this rank allocate (a message's buffer is
  // allocated when it arrives, before anyone asks for it): the largest
  // message taken (set it to the largest tensor the group exchanges), and
  // the bytes of messages arrived and not yet claimed. A message beyond
  // either is refused before anything is allocated, counted
  // (refused_oversized()) and logged at most every 10 s.
  uint64_t max_message_bytes = kDefaultMaxPeerMessageBytes;
  uint64_t max_inbox_bytes = kDefaultMaxPeerInboxBytes;
};

class PeerGroup {
 public:
  // Takes this rank's endpoint and installs its receive handler at once, so
  // peers may send as soon as they know address().
  PeerGroup(std::unique_ptr<Transport> transport, int rank, int size, PeerGroupOptions options);
  ~PeerGroup();
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const PeerGroupOptions& options() const { return options_; }
  std::string address() const { return transport_->address(); }
  // Transport::CheckReceiveQueue of this rank's endpoint.
  absl::Status CheckReceiveQueue(absl::Duration timeout) {
    return transport_->CheckReceiveQueue(timeout);
  }
  // Replaces this rank's endpoint with a fresh one at a new address()
  // (Transport::Reset): the cure for a receive queue CheckReceiveQueue found
  // wedged. Peers must connect to the new address (their UpdateAddresses)
  // before sending again; this rank's endpoints to its peers are made again
  // on their next send. Sends and receives in flight fail the group, which
  // the next Reset clears.
  absl::Status RenewEndpoint();
  std::string Describe(int rank) const;

  // The transport addresses of ranks 0..size-1 (this rank's included).
  // Endpoints are created on first use.
  absl::Status Connect(const std::vector<std::string>& addresses);

  // Queues `bytes` to `peer` under `tag`; returns at once. A failed send
  // fails the group: later calls return its status.
  absl::Status SendBytes(int peer, uint64_t tag, std::string bytes);
  // The same for floats (no copy: the vector is kept until sent).
  absl::Status Send(int peer, uint64_t tag, std::vector<float> data);

  // Waits for the message (peer, tag) and returns its bytes.
  absl::StatusOr<std::string> RecvBytes(int peer, uint64_t tag, absl::string_view what);
  // The same as floats. If `expected` >= 0 the message must have that many.
  absl::StatusOr<std::vector<float>> Recv(int peer, uint64_t tag, absl::string_view what,
                                          int64_t expected = -1);

  // Waits until every message this rank sent in this generation has left
  // (its buffer released).
  absl::Status Flush();

  // Fails every current and future wait with `status` (e.g. a peer is known
  // dead). Idempotent: the first status wins.
  void Abort(absl::Status status);

  // Starts `generation` (> the current one; otherwise nothing happens): the
  // group's failure is cleared, messages are stamped with it and only
  // messages of it are received; those of older generations, queued or
  // still arriving, are dropped, and sends of older generations still in
  // flight no longer count (Flush) or fail the group. For a recovery that
  // restarts a step every member runs again: a message of the abandoned
  // attempt can never be taken for one of the rerun (tags repeat). Every
  // member must Reset to the same generation before sending anything of it.
  // Generations start at {0, 0}.
  void Reset(PeerGeneration generation);
  PeerGeneration generation();

  // The addresses of ranks 0..size-1 as last connected, and a new set (a
  // member was replaced by a process at another address): endpoints of
  // ranks whose address changed are made again on their next send.
  std::vector<std::string> addresses();
  void UpdateAddresses(const std::vector<std::string>& addresses);

  // A message with `tag` from any rank, of this generation or a newer one
  // (a replacement process learning the generation its peers are at), within
  // `timeout`; DeadlineExceeded if none came. Of several, the newest
  // generation's (older ones stay until a Reset drops them).
  struct Message {
    int from = 0;
    PeerGeneration generation;
    std::string bytes;
  };
  absl::StatusOr<Message> RecvAny(uint64_t tag, absl::Duration timeout);

  // Installs (or, with nullptr, removes) the health check: blocked waits call
  // it every health_period, outside the group's lock; a non-OK status aborts
  // the group with that status. It may block briefly (e.g. one RPC).
  void SetHealthCheck(std::function<absl::Status()> check);

  // Authenticates every message from here on (see the top; nullptr: none).
  // Set it before the group's address is handed out (before JoinMesh), so
  // that no message is ever taken unauthenticated, and again with a new
  // secret (a shard server that held it restarted) before a Reset.
  void SetAuth(std::shared_ptr<FrameAuth> auth);
  bool authenticated();
  // Messages dropped for a missing or wrong tag, since the group was made
  // (also the metric tessel_peer_messages_unauthenticated_total{group,rank}).
  int64_t refused_unauthenticated();
  // Messages refused for their size (PeerGroupOptions::max_message_bytes,
  // max_inbox_bytes), since the group was made.
  int64_t refused_oversized();

  // Stops the transport; pending sends complete with Cancelled.
  void Shutdown();

 private:
  struct Key {
    int from;
    PeerGeneration generation;
    uint64_t tag;
    friend bool operator==(const Key& a, const Key& b) {
      return a.from == b.from && a.generation == b.generation && a.tag == b.tag;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.from, k.generation, k.tag);
    }
  };
  struct Slot {
    // The payload lands here (a vector: its buffer stays put when the map
    // moves the slot; a short std::string's would not).
    std::vector<uint8_t> data;
    bool complete = false;
  };

  Accept OnMessage(const Incoming& in);
  // Sends `bytes` bytes at `data`, kept alive by `owner` until sent.
  absl::Status SendPayload(int peer, uint64_t tag, std::shared_ptr<const void> owner,
                           const void* data, size_t bytes);
  absl::StatusOr<std::vector<uint8_t>> RecvPayload(int peer, uint64_t tag, absl::string_view what);
  // Waits until `done` (under mu_) holds or the group fails, up to the
  // deadline, running the health check meanwhile. True if `done` holds.
  bool AwaitOrFail(const std::function<bool()>& done);
  absl::StatusOr<PeerId> PeerFor(int rank);
  std::string Where() const;

  const int rank_;
  const int size_;
  const PeerGroupOptions options_;
  const uint64_t group_id_;
  std::unique_ptr<Transport> transport_;

  absl::Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> peers_ ABSL_GUARDED_BY(mu_);  // PeerId per rank, -1 until connected
  absl::flat_hash_map<Key, Slot> inbox_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_sends_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  PeerGeneration generation_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::function<absl::Status()>> health_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FrameAuth> auth_ ABSL_GUARDED_BY(mu_);
  int64_t refused_unauthenticated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refused_oversized_ ABSL_GUARDED_BY(mu_) = 0;
  // tessel_peer_messages_unauthenticated_total{group, rank}
  metrics::Counter* const unauthenticated_metric_;
};

// Peer discovery through the registry: joins `group` as (ROLE_WORKER, rank)
// with `address` as the member's UCX address, waits until ranks 0..size-1
// are all present, and returns their addresses by rank and the group's epoch
// at that moment (any later change means a member left or lapsed).
// `registry` keeps the membership's lease; keep it alive as long as the group
// is used. Fails, naming the missing ranks, after `timeout`, or at once if a
// member with a rank >= size is present (processes disagree on the world
// size). With `wait_for_rank`, a rank still held (by a dead predecessor whose
// lease has not lapsed yet) is retried until `timeout`.
struct MeshView {
  std::vector<std::string> addresses;
  std::vector<std::string> incarnations;  // v1::Member.incarnation by rank
  int64_t epoch = 0;
};
absl::StatusOr<MeshView> JoinMesh(RegistryClient* registry, const std::string& group, int rank,
                                  int size, const std::string& address, absl::Duration timeout,
                                  bool wait_for_rank = false);
// This process's membership of `group` (rank `rank`) again, under a new
// `address` (a renewed endpoint): leaves, then joins (retrying while the
// registry still holds the rank) until `timeout`. Does not wait for the
// other ranks.
absl::Status RejoinMesh(RegistryClient* registry, const std::string& group, int rank,
                        const std::string& address, absl::Duration timeout);

}  // namespace tessel

#endif  // TESSEL_WORKER_PEER_GROUP_H_
