// The header of a peer-group message: what every worker-to-worker message
// (a hybrid job's tensor-parallel sums, pipeline activations and their
// gradients) carries before its payload, and its decoder, which sees every
// byte a peer sends first (so it is fuzzed: fuzz/peer_message_fuzzer.cc).
//
// 40 bytes, little-endian (as all of Tessel):
//   0  magic "TPG1"    4  version (1)      6  flags (0)
//   8  group id       16  sender rank     20  generation (PeerGroup::Reset)
//   24 tag            32  payload bytes
// Pure: no I/O, no threads.
//
// Example:
//   std::vector<uint8_t> bytes = EncodePeerHeader(h);
//   absl::StatusOr<PeerMessageHeader> back = DecodePeerHeader(bytes);  // == h
#ifndef TESSEL_WORKER_PEER_MESSAGE_H_
#define TESSEL_WORKER_PEER_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessel {

inline constexpr size_t kPeerHeaderBytes = 40;

struct PeerMessageHeader {
  uint64_t group_id = 0;
  int32_t from = 0;
  uint32_t generation = 0;
  uint64_t tag = 0;
  uint64_t payload_bytes = 0;
};

std::vector<uint8_t> EncodePeerHeader(const PeerMessageHeader& h);
// InvalidArgument, naming the problem, for anything but a header this build
// writes: another length, magic or version, non-zero flags. Whether the
// sender, group and payload fit the receiving group is the group's check.
absl::StatusOr<PeerMessageHeader> DecodePeerHeader(absl::Span<const uint8_t> bytes);

}  // namespace tessel

#endif  // TESSEL_WORKER_PEER_MESSAGE_H_
