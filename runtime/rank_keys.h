// Per-rank, per-direction data-path frame keys (Tessel issue 42; the wire
// format is runtime/frame_auth.h's: a 16-byte SipHash-2-4-128 tag after the
// 64-byte header). A shard server holds one 32-byte secret per job
// (NewJobSecret) and derives, for each (rank, epoch), a rank secret that it
// hands to that rank's worker only (GetFrameKey, server/frame_keys.h); from
// the rank secret come two keys:
//   up   (worker -> server: PUSH, PULL, INIT), checked by the server against
//        the header's `rank`: a worker cannot send as another rank;
//   down (server -> worker: PARAMS, ERROR, addressed by `rank`): a worker
//        cannot forge a server's frame toward another worker.
// Host aggregation (docs/hierarchical.md): the workers of one host group also
// get the group's secret for the epoch (only the group's ranks get it); frames
// between them (PUSH to the bucket's aggregator, PULL and READY notices, the
// aggregator's forwarded PARAMS, re-sealed) carry the group's tag. So a worker
// can forge frames only toward the workers of its own host group, which take
// their parameters from that group's aggregator anyway.
//
//   rank secret = HMAC-SHA256(job secret, "tessel rank secret v2" | job id |
//                             shard | rank | epoch [| generation]) (32 bytes)
//   host secret = HMAC-SHA256(job secret, "tessel host secret v2" | job id |
//                             shard | group | epoch)                (32 bytes)
//   up / down / host key = first 16 bytes of HMAC-SHA256(that secret,
//                          "tessel frame key v2 up" / "... down" / "... host")
//
// The generation of a (rank, epoch) counts the times the rank was handed to
// a replacement process at that epoch (server/frame_keys.h, FrameKeys::
// Claim); generation 0, the one of every rank that was never handed over,
// has no generation field in the derivation (the secret of a job without a
// handover is the one it always was), generation g > 0 appends it (int32).
// A handover moves the server to the next generation's keys: frames under
// the previous generation's up key no longer verify, and the server seals
// toward the rank under the new down key.
//
// Payload integrity (the server's --data_integrity=payload; GetFrameKey's
// key_version 3): each of those secrets also gives a payload key (the first
// 32 bytes of HMAC-SHA256(that secret, "tessel payload key v1 up" / "...
// down" / "... host")); every frame then carries its payload's tag under the
// payload key of the direction its header tag uses (runtime/frame_auth.h,
// PayloadKey), and its sealed header is 96 bytes, never 80.
//
// Threads: both classes are safe to share (the server's caches keys under a
// short lock; a worker's keys are const after Create).
//
// Example:
//   auto job = JobFrameKeys::Create(NewJobSecret(), JobId("mlp"), /*shard=*/0);
//   FrameKeyGrant g{(*job)->RankSecret(1, epoch), ""};
//   auto mine = RankFrameKeys::Create(g, JobId("mlp"), 0, /*rank=*/1, epoch);
//   SealedHeader push = (*mine)->Seal(push_header, /*to_worker=*/false);
//   bool ok = (*job)->VerifyFromWorker(push, push_header);   // true
#ifndef TESSEL_RUNTIME_RANK_KEYS_H_
#define TESSEL_RUNTIME_RANK_KEYS_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/wire.h"
#include "runtime/frame_auth.h"

namespace tessel {

// The GetFrameKey answer's versions a worker understands: per-rank keys
// (header tags), and per-rank keys with payload tags.
inline constexpr int32_t kRankKeysVersion = 2;
inline constexpr int32_t kPayloadKeysVersion = 3;

// What a worker gets from a shard server for its rank and epoch.
struct FrameKeyGrant {
  std::string rank_secret;  // "" when the server does not authenticate frames
  std::string host_secret;  // "" unless the rank shares a host group
  bool payload = false;     // payloads are tagged too (kPayloadKeysVersion)
};

// A shard server's keys of one job (the job's secret on this server).
class JobFrameKeys {
 public:
  // InvalidArgument unless `secret` is kJobSecretBytes long.
  // `payload`: frames carry payload tags too (96-byte sealed headers).
  static absl::StatusOr<std::shared_ptr<JobFrameKeys>> Create(absl::string_view secret,
                                                              uint64_t job_id, int32_t shard,
                                                              bool payload = false);
  uint64_t job_id() const { return job_id_; }
  int32_t shard() const { return shard_; }
  bool payload() const { return payload_; }

  // The rank's secret of `epoch` in `generation` (see the file comment).
  std::string RankSecret(int32_t rank, int64_t epoch, int32_t generation = 0) const;
  std::string HostSecret(int32_t group, int64_t epoch) const;
  // The generation whose keys this server takes and seals with for (rank,
  // epoch) now: 0 until SetGeneration moves it.
  int32_t Generation(int32_t rank, int64_t epoch);
  // From now on (rank, epoch)'s keys are those of `generation` (a handover:
  // server/frame_keys.h). Only FrameKeys::Claim calls it.
  void SetGeneration(int32_t rank, int64_t epoch, int32_t generation);
  // True if `am_header` is sealed under the up key of (h.rank, h.epoch) in
  // its current generation and `h` (its first 64 bytes decoded) is of this
  // job and shard. The caller checks h.rank against the job's world size
  // first (keys exist only for its ranks; a rank outside it is no key's).
  // `generation` (if not null) receives the generation it verified under.
  bool VerifyFromWorker(absl::Span<const uint8_t> am_header, const FrameHeader& h,
                        int32_t* generation = nullptr);
  // With payload tags: whether `am_header` (verified above) carries the tag
  // of the h.payload_bytes bytes at `payload` under the up payload key of
  // (h.rank, h.epoch). True when payloads are not tagged.
  bool VerifyPayloadFromWorker(absl::Span<const uint8_t> am_header, const FrameHeader& h,
                               const void* payload);
  // `h` sealed under the down key of (h.rank, h.epoch): PARAMS and ERROR
  // (header tag only).
  SealedHeader SealToWorker(const FrameHeader& h);
  // The same in this job's mode: with payload tags, the tag of the
  // h.payload_bytes bytes at `payload` too.
  WireHeader SealFrameToWorker(const FrameHeader& h, const void* payload);

 private:
  struct RankKeys {
    int32_t generation = 0;
    std::shared_ptr<const MacKey> up, down;
    std::shared_ptr<const PayloadKey> up_payload, down_payload;  // with payload tags
  };
  JobFrameKeys(std::string secret, uint64_t job_id, int32_t shard, bool payload)
      : secret_(std::move(secret)), job_id_(job_id), shard_(shard), payload_(payload) {}
  RankKeys KeysOf(int32_t rank, int64_t epoch);

  const std::string secret_;
  const uint64_t job_id_;
  const int32_t shard_;
  const bool payload_;
  absl::Mutex mu_;
  // Newest epoch first; the last few epochs' keys stay derived.
  std::deque<std::pair<int64_t, absl::flat_hash_map<int32_t, RankKeys>>> epochs_
      ABSL_GUARDED_BY(mu_);
  // (rank, epoch) -> its generation, for those handed over (one entry per
  // handover at most: rare, and kept for the job's life on this server).
  absl::flat_hash_map<std::pair<int32_t, int64_t>, int32_t> generations_ ABSL_GUARDED_BY(mu_);
};

// A worker's keys for one shard at one (rank, epoch).
class RankFrameKeys {
 public:
  // InvalidArgument unless the rank secret (and the host secret, if any) is
  // kJobSecretBytes long.
  static absl::StatusOr<std::shared_ptr<const RankFrameKeys>> Create(const FrameKeyGrant& grant,
                                                                     uint64_t job_id, int32_t shard,
                                                                     int32_t rank, int64_t epoch);
  int32_t rank() const { return rank_; }
  int64_t epoch() const { return epoch_; }
  bool has_host_key() const { return host_ != nullptr; }
  // Frames carry payload tags (the grant's `payload`).
  bool payload() const { return up_payload_ != nullptr; }

  // A frame to a server (up key) or to a worker of this host group (host
  // key; a rank without a group has none and seals under its up key, which
  // no worker accepts).
  SealedHeader Seal(const FrameHeader& h, bool to_worker) const;
  // The same in this rank's mode: with payload tags, the tag of the
  // h.payload_bytes bytes at `payload` too (96 bytes).
  WireHeader SealFrame(const FrameHeader& h, bool to_worker, const void* payload) const;
  // Whether a frame that arrived is authentic for this rank: PARAMS or ERROR
  // addressed to this rank under its down key (a server's); PARAMS, PUSH,
  // PULL or READY from another rank of this host group under the host key.
  // Always false for another job, shard or epoch, or a sealed header of the
  // other mode's size.
  bool Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h) const;
  // With payload tags: whether `am_header` (Verify'd) carries the tag of the
  // h.payload_bytes bytes at `payload`, under the payload key of the
  // direction Verify took. True when payloads are not tagged.
  bool VerifyPayload(absl::Span<const uint8_t> am_header, const FrameHeader& h,
                     const void* payload) const;

 private:
  RankFrameKeys(uint64_t job_id, int32_t shard, int32_t rank, int64_t epoch)
      : job_id_(job_id), shard_(shard), rank_(rank), epoch_(epoch) {}
  const uint64_t job_id_;
  const int32_t shard_;
  const int32_t rank_;
  const int64_t epoch_;
  std::unique_ptr<const MacKey> up_, down_, host_;
  std::unique_ptr<const PayloadKey> up_payload_, down_payload_, host_payload_;
};

}  // namespace tessel

#endif  // TESSEL_RUNTIME_RANK_KEYS_H_
