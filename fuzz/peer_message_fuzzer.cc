// Fuzz target: tessel::DecodePeerHeader, the peer-group message header
// decoder. Every worker-to-worker message of a hybrid job passes through it
// first.
//
// Invariants:
//   - rejection is InvalidArgument, never a crash;
//   - only 48-byte inputs are accepted, and an accepted header re-encodes to
//     exactly the same 48 bytes (Decode and Encode are inverse);
//   - the result does not depend on the buffer's alignment.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "worker/peer_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<tessel::PeerMessageHeader> h =
      tessel::DecodePeerHeader(absl::MakeConstSpan(data, size));

  std::vector<uint8_t> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  absl::StatusOr<tessel::PeerMessageHeader> h2 =
      tessel::DecodePeerHeader(absl::MakeConstSpan(shifted.data() + 1, size));
  FUZZ_CHECK(h.ok() == h2.ok(), "decoding depends on the buffer's alignment");

  if (!h.ok()) {
    tessel::fuzz::CheckRefusal(h.status());
    return 0;
  }
  FUZZ_CHECK(size == tessel::kPeerHeaderBytes,
             absl::StrCat("accepted a ", size, "-byte peer-group header"));
  const std::vector<uint8_t> again = tessel::EncodePeerHeader(*h);
  FUZZ_CHECK(
      again.size() == size && std::memcmp(again.data(), data, size) == 0,
      absl::StrCat("decoded header (from ", h->from, ", generation ", h->generation.ToString(),
                   ", tag ", h->tag, ") re-encodes to different bytes"));
  FUZZ_CHECK(again == tessel::EncodePeerHeader(*h2), "misaligned decode gave different fields");
  return 0;
}
