// The frames //tests:attacker sends, and how it sends them: a list of frames
// (each with the kind it counts under), sprayed at one peer over a transport,
// with a count of what that peer sent back.
//
// Example:
//   std::vector<AttackFrame> frames;
//   AddFrame(&frames, "push", EncodeHeader(h), 4096);
//   SprayResult r = Spray(*transport, peer, frames);
//   std::cout << r.done << " sent, " << KindCounts(frames) << "\n";
#ifndef TESSEL_TESTS_ATTACK_FRAMES_H_
#define TESSEL_TESTS_ATTACK_FRAMES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/transport.h"

namespace tessel {

// One frame: the active-message header as it goes out (64, 80 or 96 bytes)
// and its payload; `kind` names the attack in the counters.
struct AttackFrame {
  std::string kind;
  std::string header;
  std::vector<uint8_t> payload;
};

// Appends a frame of `kind` with `header` and `payload_bytes` bytes of 0x7F
// (3.4e38 in every float lane: applied once, it would wreck the parameters).
void AddFrame(std::vector<AttackFrame>* frames, const std::string& kind,
              absl::Span<const uint8_t> header, size_t payload_bytes);

struct SprayResult {
  size_t done = 0;    // sends completed (either way)
  size_t failed = 0;  // sends that completed with an error
};

// Sends every frame to `to` and waits up to `limit` for the sends to
// complete.
SprayResult Spray(Transport& transport, PeerId to, const std::vector<AttackFrame>& frames,
                  absl::Duration limit = absl::Seconds(20));

// "kind=N kind=N ..." in first-seen order.
std::string KindCounts(const std::vector<AttackFrame>& frames);

// A handler for the attacker's own transport that takes nothing and counts
// the frames its peers sent it (a replayed PULL that were taken would be
// answered with PARAMS).
Transport::Handler CountingHandler(std::atomic<int64_t>* received);

}  // namespace tessel

#endif  // TESSEL_TESTS_ATTACK_FRAMES_H_
