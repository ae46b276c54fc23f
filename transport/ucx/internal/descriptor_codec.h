// The wire codec of the UCX transport's zero-copy messages: a DESCRIPTOR (a
// payload that lies in the sender's payload memory, sent as where it lies
// instead of its bytes) and the receiver's RELEASE of it. Pure: no UCX, no
// I/O, no threads; every function may be called from any thread.
//
// Both travel as UCX active-message headers between two processes of one
// build, little-endian:
//
//   DESCRIPTOR  lease u64 | region u64 | remote_base u64 | region_bytes u64 |
//               offset u64 | bytes u64 | header_len u32 | rkey_len u32 |
//               header (header_len bytes) | rkey (rkey_len bytes)
//   RELEASE     lease u64 | status u8 | 7 bytes of padding (ignored)
//
// `header` is the transport user's message header; `rkey` the region's
// packed UCX remote key (ucp_rkey_pack), which the receiver unpacks and maps
// (ucp_rkey_ptr) to read `bytes` at `remote_base + offset`. `region_bytes`
// is the region's size: the payload must lie inside it
// (offset + bytes <= region_bytes, computed without overflow), or the
// descriptor is refused, so a descriptor can never name memory beyond the
// region the sender registered (ucp_rkey_ptr itself checks no bounds). The
// receiver keeps the size a region was first described with
// (RemoteKeyCache) and refuses a later descriptor that describes it
// otherwise.
//
// The bytes come from another process, so decoding trusts nothing: any input
// yields a DescriptorView / Release or InvalidArgument saying what is wrong,
// never a crash or a read outside the input (fuzz/ucx_descriptor_fuzzer.cc).
// A view borrows the decoded buffer and is valid as long as it is.
//
// Example:
//   std::vector<uint8_t> wire = EncodeDescriptor(fields, header, rkey);
//   absl::StatusOr<DescriptorView> d = DecodeDescriptor(wire);
//   if (!d.ok()) { /* log d.status() and drop the message */ }
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_DESCRIPTOR_CODEC_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_DESCRIPTOR_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessel {
namespace ucx_internal {

// The fixed part of a descriptor, before the header and the rkey.
inline constexpr size_t kDescriptorFixedBytes = 56;
// A RELEASE message, padding included.
inline constexpr size_t kReleaseBytes = 16;

// Where a payload lies in the sender's payload memory.
struct DescriptorFields {
  uint64_t lease = 0;         // the sender's handle of this send (echoed by RELEASE)
  uint64_t region = 0;        // the sender's id of its payload-memory region
  uint64_t remote_base = 0;   // the region's address in the sender
  uint64_t region_bytes = 0;  // the region's size
  uint64_t offset = 0;        // the payload's offset in the region
  uint64_t bytes = 0;         // the payload's size
};

// A decoded descriptor; `header` and `rkey` point into the decoded buffer.
struct DescriptorView {
  DescriptorFields fields;
  absl::Span<const uint8_t> header;
  absl::Span<const uint8_t> rkey;  // never empty
};

// The descriptor of `fields` with the user's `header` and the packed `rkey`.
std::vector<uint8_t> EncodeDescriptor(const DescriptorFields& fields,
                                      absl::Span<const uint8_t> header,
                                      absl::Span<const uint8_t> rkey);

// InvalidArgument unless `wire` is exactly one descriptor: the fixed part,
// then header_len + rkey_len bytes and no more, a non-empty rkey, and the
// payload inside the region: offset + bytes <= region_bytes, without
// overflow.
absl::StatusOr<DescriptorView> DecodeDescriptor(absl::Span<const uint8_t> wire);

// How the receiver ended a descriptor; also tells the sender the path its
// payload took.
enum class ReleaseStatus : uint8_t {
  kReadInPlace = 0,  // read (or borrowed and released) where it lies
  kResend = 1,       // cannot be mapped here: send it again through the queues
  kDropped = 2,      // the receiver refused the message
};

struct Release {
  uint64_t lease = 0;
  ReleaseStatus status = ReleaseStatus::kReadInPlace;
};

std::vector<uint8_t> EncodeRelease(const Release& release);
// InvalidArgument unless `wire` is kReleaseBytes long with a known status.
absl::StatusOr<Release> DecodeRelease(absl::Span<const uint8_t> wire);

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_DESCRIPTOR_CODEC_H_
