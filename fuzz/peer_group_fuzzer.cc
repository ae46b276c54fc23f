// Fuzz target: the peer group's message handler end to end, PeerGroup::
// OnMessage (worker/peer_group.h), installed on FakeTransport by the
// PeerGroup itself, fed messages as a hostile peer sends them
// (fuzz/frame_input.h: header bytes, payload_bytes, in-place payload and
// contents from the input); then every message that was taken is received
// (RecvBytes), which hands its bytes back and frees its slot.
//
// The first input byte (frame_jobs.h kPeer*): authentication (SetAuth; a
// message flagged kSeal carries the mesh key's tag for its generation), the
// small bounds (kFuzzPeerMaxMessage, kFuzzPeerMaxInbox) or larger ones,
// this rank, and a Reset to a later generation first. Every decodable header is
// stamped with the group's id unless its frame is flagged kForeignGroup.
//
// Invariants besides "no crash, no sanitizer report":
//   - no buffer is written past its size (ASan) and no handler gives
//     more room than max_message_bytes; nothing is ever borrowed;
//   - with authentication on, a message without a valid tag is refused and
//     counted in refused_unauthenticated();
//   - a message of another group, from a rank outside the group or this
//     rank itself, of an older generation, or whose payload is not its
//     header's size, is refused;
//   - a message over the bounds is refused and counted in
//     refused_oversized(), and the bytes held for unclaimed messages never
//     exceed max_inbox_bytes;
//   - RecvBytes of a message that was taken returns exactly its bytes.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/wire.h"
#include "fuzz/fake_transport.h"
#include "fuzz/frame_input.h"
#include "fuzz/frame_jobs.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/quiet_logs.h"
#include "runtime/frame_auth.h"
#include "worker/peer_group.h"
#include "worker/peer_message.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return tessel::fuzz::QuietLogs(); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  using namespace tessel::fuzz;
  const uint8_t config = ConfigByte(data, size);
  const bool auth_on = (config & kPeerAuth) != 0;
  const int rank = ((config & kPeerRank) >> 2) % kFuzzPeers;
  const PeerGeneration generation = (config & kPeerReset) != 0 ? kFuzzPeerReset : PeerGeneration{};

  PeerGroupOptions options;
  options.name = kFuzzMesh;
  options.timeout = absl::Milliseconds(1);  // every RecvBytes below finds its message there
  options.health_period = absl::Seconds(10);
  // The defaults' bounds (256 MiB, 1 GiB) are the same code with numbers a
  // fuzzer cannot fill quickly: the larger bounds here stand for them.
  const bool small = (config & kPeerSmallBounds) != 0;
  options.max_message_bytes = small ? kFuzzPeerMaxMessage : kFuzzPeerLargeMaxMessage;
  options.max_inbox_bytes = small ? kFuzzPeerMaxInbox : kFuzzPeerLargeMaxInbox;
  auto owned_transport = std::make_unique<FakeTransport>(options.max_message_bytes);
  FakeTransport& transport = *owned_transport;
  PeerGroup group(std::move(owned_transport), rank, kFuzzPeers, options);
  std::shared_ptr<FrameAuth> key;
  if (auth_on) {
    key = *FrameAuth::Create(std::string(kJobSecretBytes, 'm'), JobId(kFuzzMesh), -1);
    group.SetAuth(key);
  }
  if (generation != PeerGeneration{}) group.Reset(generation);
  // The group's id, as its own messages carry it: a message flagged
  // kForeignGroup keeps the id its header has, every other decodable one is
  // stamped with this (so mutations start inside the group).
  std::vector<std::string> addresses(kFuzzPeers);
  FUZZ_CHECK(group.Connect(addresses).ok(), "Connect failed");
  FUZZ_CHECK(group.SendBytes((rank + 1) % kFuzzPeers, 0, "").ok(), "SendBytes failed");
  const std::vector<FakeTransport::Sent> own = transport.sent();
  FUZZ_CHECK(own.size() == 1 && own[0].header.size() >= kPeerHeaderBytes,
             "the group sent no header");
  absl::StatusOr<PeerMessageHeader> own_header =
      DecodePeerHeader(absl::MakeConstSpan(own[0].header.data(), kPeerHeaderBytes));
  FUZZ_CHECK(own_header.ok(), own_header.status().ToString());
  const uint64_t group_id = own_header->group_id;
  transport.RunCompletions();

  // (from, generation, tag) -> bytes, of every message taken and not yet received.
  std::map<std::tuple<int, PeerGeneration, uint64_t>, std::vector<uint8_t>> taken;
  uint64_t held = 0;
  std::string trace;  // shown by --repro (TESSEL_FUZZ_SHOW_INPUT)
  ForEachFrame(data, size, [&](const FuzzFrame& f) {
    std::vector<uint8_t> header = f.header;
    absl::StatusOr<PeerMessageHeader> decoded =
        header.size() >= kPeerHeaderBytes
            ? DecodePeerHeader(absl::MakeConstSpan(header.data(), kPeerHeaderBytes))
            : absl::InvalidArgumentError("short");
    if (decoded.ok() && (f.target_bits() & kForeignGroup) == 0) {
      decoded->group_id = group_id;
      const std::vector<uint8_t> stamped = EncodePeerHeader(*decoded);
      std::copy(stamped.begin(), stamped.end(), header.begin());
    }
    const bool sealed = key != nullptr && f.seal() && decoded.ok();
    if (sealed) {
      header.resize(kPeerHeaderBytes);
      const auto tag =
          key->TagOf(absl::MakeConstSpan(header), static_cast<int64_t>(decoded->generation.epoch));
      header.insert(header.end(), tag.begin(), tag.end());
    }
    const uint64_t payload_bytes = f.PayloadBytes(decoded.ok() ? decoded->payload_bytes : 0);
    const int64_t unauthenticated_before = group.refused_unauthenticated();
    const int64_t oversized_before = group.refused_oversized();
    const FakeTransport::Outcome out = transport.Deliver((f.target_bits() & 7) + 1, header,
                                                         payload_bytes, f.content, f.in_place());
    const int64_t unauthenticated = group.refused_unauthenticated() - unauthenticated_before;
    const int64_t oversized = group.refused_oversized() - oversized_before;
    absl::StrAppend(
        &trace,
        decoded.ok()
            ? absl::StrCat("message from ", decoded->from, " gen ", decoded->generation.ToString(),
                           " tag ", decoded->tag, " bytes ", decoded->payload_bytes)
            : "(undecodable)",
        sealed ? " sealed" : "", " payload ", payload_bytes, ": ",
        out.written ? "taken" : "not taken", unauthenticated > 0 ? ", unauthenticated" : "",
        oversized > 0 ? ", oversized" : "", "\n");
    FUZZ_CHECK(!out.borrowed, "the peer group borrowed a message");
    // The header as the handler reads it: the first 48 bytes of a tagged
    // (64-byte) one, else all of it.
    const bool tagged = header.size() == kPeerHeaderBytes + kFrameTagBytes;
    absl::StatusOr<PeerMessageHeader> seen = DecodePeerHeader(
        absl::MakeConstSpan(header.data(), tagged ? kPeerHeaderBytes : header.size()));
    if (!seen.ok()) {
      FUZZ_CHECK(!out.written, "an undecodable message was taken");
      return;
    }
    const PeerMessageHeader& h = *seen;
    if (auth_on && !sealed) {
      FUZZ_CHECK(
          !out.written && unauthenticated == 1,
          absl::StrCat("a message without the mesh key's tag was taken or not counted: ", trace));
      return;
    }
    const bool stray = h.group_id != group_id || h.from < 0 || h.from >= kFuzzPeers ||
                       h.from == rank || h.payload_bytes != payload_bytes ||
                       h.generation < generation;
    if (stray) {
      FUZZ_CHECK(!out.written && oversized == 0,
                 absl::StrCat("a stray message was taken or counted: ", trace));
      return;
    }
    if (payload_bytes > options.max_message_bytes ||
        payload_bytes > options.max_inbox_bytes - held) {
      FUZZ_CHECK(!out.written && oversized == 1,
                 absl::StrCat("a message over the bounds was not refused as such (", held,
                              " bytes held)"));
      return;
    }
    const auto k = std::make_tuple(static_cast<int>(h.from), h.generation, h.tag);
    if (taken.count(k) != 0) {
      FUZZ_CHECK(!out.written, "a second message for an unclaimed (peer, tag) was taken");
      return;
    }
    FUZZ_CHECK(out.written || payload_bytes == 0,
               absl::StrCat("a well-formed message within the bounds was not taken: ", trace));
    taken[k] = Materialize(f.content, static_cast<size_t>(payload_bytes));
    held += payload_bytes;
    FUZZ_CHECK(held <= options.max_inbox_bytes, "the inbox holds more than its bound");
  });
  ShowGeneratedInput(
      absl::StrCat("config ", static_cast<int>(config), " rank ", rank, "\n", trace));
  for (const auto& [k, bytes] : taken) {
    const auto& [from, gen, tag] = k;
    if (gen != group.generation()) continue;  // RecvBytes takes the current generation's
    absl::StatusOr<std::string> got = group.RecvBytes(from, tag, "a fuzzed message");
    if (!got.ok()) continue;  // the group failed (a reused tag): every wait fails
    FUZZ_CHECK(std::string(bytes.begin(), bytes.end()) == *got,
               absl::StrCat("RecvBytes(", from, ", ", tag, ") returned other bytes than arrived"));
  }
  return 0;
}
