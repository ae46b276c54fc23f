// Data-path frame authentication: a 16-byte tag after the 64-byte frame
// header, SipHash-2-4-128 over the header bytes under a key that is unique
// to (job, shard, epoch). A process without the job's secret cannot make a
// frame a server or worker accepts; a frame of one job, shard or epoch is
// refused in every other one (docs/security.md, "Data-path
// authentication", has the threat model: the payload is not covered).
//
// The secret is a shard server's, per job: 32 random bytes made when the
// job is created there (NewJobSecret), handed to the job's workers only
// over the authenticated, role-checked control plane (GetFrameKey). The key
// of an epoch is HMAC-SHA256(secret, "tessel frame key v1" | job id | shard
// | epoch), its first 16 bytes; it changes with every recovery's epoch.
//
// Payload integrity (docs/wire-protocol.md, "Payload tags"; optional, the
// shard server's --data_integrity=payload): the 16-byte tag of the frame's
// payload goes between the header and the header tag (header 64 | payload
// tag 16 | header tag 16, the header tag over the first 80 bytes): Poly1305
// under a one-time key, HMAC-SHA256(payload key, the 64 header bytes). The
// per-rank keys of runtime/rank_keys.h make and check them.
//
// Threads: a FrameAuth is safe to share; Seal and Verify take a short lock
// to find the epoch's key (derived once per epoch, the last few kept).
// MacKey and PayloadKey are immutable after construction.
//
// Example:
//   auto auth = FrameAuth::Create(secret, JobId("mlp"), /*shard=*/1);
//   SealedHeader wire = (*auth)->Seal(header);     // 80 bytes on the wire
//   bool ok = (*auth)->Verify(received_bytes, decoded_header);
#ifndef TESSEL_RUNTIME_FRAME_AUTH_H_
#define TESSEL_RUNTIME_FRAME_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/wire.h"

namespace tessel {

inline constexpr size_t kFrameTagBytes = 16;
inline constexpr size_t kJobSecretBytes = 32;
inline constexpr size_t kSealedHeaderBytes = kHeaderBytes + kFrameTagBytes;
using SealedHeader = std::array<uint8_t, kSealedHeaderBytes>;
// With payload integrity: header 64 | payload tag 16 | header tag 16.
inline constexpr size_t kPayloadTagBytes = 16;
inline constexpr size_t kPayloadSealedHeaderBytes = kSealedHeaderBytes + kPayloadTagBytes;
using PayloadTag = std::array<uint8_t, kPayloadTagBytes>;

// One SipHash-2-4-128 key (the one tag implementation of the data path);
// tags are made on copies of its context.
class MacKey {
 public:
  // The key: the first 16 bytes of HMAC-SHA256(secret, label).
  MacKey(absl::string_view secret, absl::string_view label);
  ~MacKey();
  MacKey(const MacKey&) = delete;
  MacKey& operator=(const MacKey&) = delete;

  std::array<uint8_t, kFrameTagBytes> Tag(absl::Span<const uint8_t> bytes) const;
  // Whether `tag` is the tag of `bytes` (constant time).
  bool VerifyTag(absl::Span<const uint8_t> bytes, absl::Span<const uint8_t> tag) const;
  // `h` encoded, then its tag.
  SealedHeader Seal(const FrameHeader& h) const;
  // Whether `am_header` is a sealed header, kSealedHeaderBytes (header 64 |
  // tag) or kPayloadSealedHeaderBytes (header 64 | payload tag | tag), whose
  // last 16 bytes are the tag of the bytes before them (constant time). The
  // caller checks that the size is its mode's.
  bool Verify(absl::Span<const uint8_t> am_header) const;

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// A payload key: 32 bytes, HMAC-SHA256(secret, label). The tag of a frame's
// payload is Poly1305 under the frame's one-time key, HMAC-SHA256(payload
// key, the frame's 64 header bytes); an ERROR frame's (a text of at most
// kMaxErrorTextBytes, which a server may word differently for the same
// header) is HMAC-SHA256(payload key, header | text), cut to 16 bytes.
class PayloadKey {
 public:
  PayloadKey(absl::string_view secret, absl::string_view label);
  ~PayloadKey();
  PayloadKey(const PayloadKey&) = delete;
  PayloadKey& operator=(const PayloadKey&) = delete;

  // The tag of `n` bytes at `payload` (null when n is 0) sent under the 64
  // encoded `header` bytes.
  PayloadTag Tag(absl::Span<const uint8_t> header, const void* payload, size_t n) const;
  // Whether `am_header` (kPayloadSealedHeaderBytes) carries the tag of the
  // `n` bytes at `payload` (constant time). The header tag is checked apart.
  bool Verify(absl::Span<const uint8_t> am_header, const void* payload, size_t n) const;

 private:
  std::array<uint8_t, 32> key_{};
};

// kJobSecretBytes from the operating system's random source.
std::string NewJobSecret();

class FrameAuth {
 public:
  // InvalidArgument unless `secret` is kJobSecretBytes long.
  static absl::StatusOr<std::shared_ptr<FrameAuth>> Create(absl::string_view secret,
                                                           uint64_t job_id, int32_t shard);
  ~FrameAuth();
  FrameAuth(const FrameAuth&) = delete;
  FrameAuth& operator=(const FrameAuth&) = delete;

  // `h` encoded, then its tag under the key of h.epoch.
  SealedHeader Seal(const FrameHeader& h);
  // True if `am_header` is a sealed header (kSealedHeaderBytes) whose tag is
  // right for its first 64 bytes under the key of `h`'s job, shard and
  // epoch (`h`: those bytes decoded). Compared in constant time.
  bool Verify(absl::Span<const uint8_t> am_header, const FrameHeader& h);

  // The same keys over any bytes (a hybrid mesh's peer-message header,
  // worker/peer_group.h): the tag of `bytes` under the key of `epoch`, and
  // whether `tag` is it (constant time).
  std::array<uint8_t, kFrameTagBytes> TagOf(absl::Span<const uint8_t> bytes, int64_t epoch);
  bool VerifyTag(absl::Span<const uint8_t> bytes, absl::Span<const uint8_t> tag, int64_t epoch);

  const std::string& secret() const { return secret_; }
  int32_t shard() const { return shard_; }

 private:
  struct Key;  // an epoch's MacKey
  FrameAuth(std::string secret, uint64_t job_id, int32_t shard)
      : secret_(std::move(secret)), job_id_(job_id), shard_(shard) {}
  // The tag of the 64 `header` bytes under the key of `epoch`.
  std::array<uint8_t, kFrameTagBytes> Tag(const uint8_t* header, int64_t epoch);
  std::shared_ptr<Key> KeyOf(int64_t epoch);

  const std::string secret_;
  const uint64_t job_id_;
  const int32_t shard_;
  absl::Mutex mu_;
  std::deque<std::pair<int64_t, std::shared_ptr<Key>>> keys_ ABSL_GUARDED_BY(mu_);  // newest first
};

// The active-message header a frame goes out with: sealed (80 bytes; 96
// with a payload tag) or the bare 64-byte header.
struct WireHeader {
  std::array<uint8_t, kPayloadSealedHeaderBytes> bytes{};
  size_t size = 0;
  absl::Span<const uint8_t> span() const { return absl::MakeConstSpan(bytes.data(), size); }
};
// Sealed when `auth` is set, bare otherwise.
WireHeader ToWire(FrameAuth* auth, const FrameHeader& h);
// A sealed 80-byte header as a WireHeader.
WireHeader ToWire(const SealedHeader& sealed);
// `h` sealed by `mac`; with `payload_key` (else header tag only), the tag of
// the h.payload_bytes bytes at `payload` between header and header tag.
WireHeader SealFrame(const MacKey& mac, const PayloadKey* payload_key, const FrameHeader& h,
                     const void* payload);

// Decodes the header of a frame that arrived with `am_header` (64 bytes, or
// a sealed 80 or 96: its first 64), as DecodeHeader does.
absl::StatusOr<FrameHeader> DecodeWireHeader(absl::Span<const uint8_t> am_header);

}  // namespace tessel

#endif  // TESSEL_RUNTIME_FRAME_AUTH_H_
