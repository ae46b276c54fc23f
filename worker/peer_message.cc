#include "worker/peer_message.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {
constexpr uint32_t kMagic = 0x31475054;  // "TPG1" little-endian
constexpr uint16_t kVersion = 2;
}  // namespace

std::string PeerGeneration::ToString() const { return absl::StrCat(epoch, ".", round); }

// Fields are copied as they lie: little-endian hosts only.
std::vector<uint8_t> EncodePeerHeader(const PeerMessageHeader& h) {
  std::vector<uint8_t> out(kPeerHeaderBytes, 0);
  const uint16_t flags = 0;
  std::memcpy(&out[0], &kMagic, 4);
  std::memcpy(&out[4], &kVersion, 2);
  std::memcpy(&out[6], &flags, 2);
  std::memcpy(&out[8], &h.group_id, 8);
  std::memcpy(&out[16], &h.from, 4);
  std::memcpy(&out[20], &h.generation.round, 4);
  std::memcpy(&out[24], &h.generation.epoch, 8);
  std::memcpy(&out[32], &h.tag, 8);
  std::memcpy(&out[40], &h.payload_bytes, 8);
  return out;
}

absl::StatusOr<PeerMessageHeader> DecodePeerHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() != kPeerHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header of ", bytes.size(), " bytes, expected ", kPeerHeaderBytes));
  }
  uint32_t magic = 0;
  uint16_t version = 0, flags = 0;
  std::memcpy(&magic, &bytes[0], 4);
  std::memcpy(&version, &bytes[4], 2);
  std::memcpy(&flags, &bytes[6], 2);
  if (magic != kMagic) return absl::InvalidArgumentError("bad magic (not a peer-group message)");
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer-group message version ", version, ", this build speaks ", kVersion));
  }
  if (flags != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer-group message flags ", flags, ": version 2 defines none"));
  }
  PeerMessageHeader h;
  std::memcpy(&h.group_id, &bytes[8], 8);
  std::memcpy(&h.from, &bytes[16], 4);
  std::memcpy(&h.generation.round, &bytes[20], 4);
  std::memcpy(&h.generation.epoch, &bytes[24], 8);
  std::memcpy(&h.tag, &bytes[32], 8);
  std::memcpy(&h.payload_bytes, &bytes[40], 8);
  return h;
}

}  // namespace tessel
