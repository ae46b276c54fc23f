// The header of a peer-group message: what every worker-to-worker message
// (a hybrid job's tensor-parallel sums, pipeline activations and their
// gradients) carries before its payload, and its decoder, which sees every
// byte a peer sends first (so it is fuzzed: fuzz/peer_message_fuzzer.cc).
//
// 48 bytes, little-endian (as all of Tessel):
//   0  magic "TPG1"    4  version (2)      6  flags (0)
//   8  group id       16  sender rank
//   20 generation round                  24 generation epoch
//   32 tag            40  payload bytes
// (Version 1, 40 bytes, had a 32-bit generation number at 20.)
// Pure: no I/O, no threads.
//
// Example:
//   std::vector<uint8_t> bytes = EncodePeerHeader(h);
//   absl::StatusOr<PeerMessageHeader> back = DecodePeerHeader(bytes);  // == h
#ifndef TESSEL_WORKER_PEER_MESSAGE_H_
#define TESSEL_WORKER_PEER_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tessel {

inline constexpr size_t kPeerHeaderBytes = 48;

// A peer group's generation (PeerGroup::Reset): the mesh view it belongs to
// (a hybrid job's mesh group epoch, worker/hybrid.h) and the recovery round
// within that view (a shard server's death leaves the view as it was).
// Ordered by epoch, then round.
struct PeerGeneration {
  uint64_t epoch = 0;
  uint32_t round = 0;

  friend bool operator==(const PeerGeneration& a, const PeerGeneration& b) {
    return a.epoch == b.epoch && a.round == b.round;
  }
  friend bool operator!=(const PeerGeneration& a, const PeerGeneration& b) { return !(a == b); }
  friend bool operator<(const PeerGeneration& a, const PeerGeneration& b) {
    return a.epoch != b.epoch ? a.epoch < b.epoch : a.round < b.round;
  }
  friend bool operator>(const PeerGeneration& a, const PeerGeneration& b) { return b < a; }
  friend bool operator<=(const PeerGeneration& a, const PeerGeneration& b) { return !(b < a); }
  friend bool operator>=(const PeerGeneration& a, const PeerGeneration& b) { return !(a < b); }
  template <typename H>
  friend H AbslHashValue(H h, const PeerGeneration& g) {
    return H::combine(std::move(h), g.epoch, g.round);
  }
  // "EPOCH.ROUND", for logs.
  std::string ToString() const;
};

struct PeerMessageHeader {
  uint64_t group_id = 0;
  int32_t from = 0;
  PeerGeneration generation;
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
