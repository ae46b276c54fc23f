// Test helper: a process that sends raw frames to a UCX address, as a
// forger that knows only a peer's address would (frame_auth_server_test).
//
// Usage: ucx_frame_sender HEX_ADDRESS UCX_TLS HEX_HEADER PAYLOAD_BYTES COUNT [hold]
// Sends COUNT messages, each the header bytes (any length) and a payload of
// PAYLOAD_BYTES bytes of 0x7F (a float32 of about 3.4e38 in every lane),
// waits for every send to complete, and exits 0 (1 on a failed send or bad
// arguments). With "hold" it then waits to be killed instead of exiting,
// connection open (ucx_peer_death_test kills it -9: a worker killed mid-job).
#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "transport/ucx/ucx_transport.h"

int main(int argc, char** argv) {
  int64_t bytes = 0, count = 0;
  const bool hold = argc == 7 && std::string(argv[6]) == "hold";
  if ((argc != 6 && !hold) || !absl::SimpleAtoi(argv[4], &bytes) ||
      !absl::SimpleAtoi(argv[5], &count) || bytes < 0 || count < 1) {
    std::cerr << "usage: ucx_frame_sender HEX_ADDRESS UCX_TLS HEX_HEADER PAYLOAD_BYTES COUNT "
                 "[hold]\n";
    return 1;
  }
  auto transport = tessel::UcxTransport::Create({.tls = argv[2]});
  if (!transport.ok()) {
    std::cerr << transport.status() << "\n";
    return 1;
  }
  (*transport)->SetHandler([](const tessel::Incoming&) { return tessel::Accept{}; });
  auto peer = (*transport)->Connect(absl::HexStringToBytes(argv[1]));
  if (!peer.ok()) {
    std::cerr << peer.status() << "\n";
    return 1;
  }
  const std::string header = absl::HexStringToBytes(argv[3]);
  std::vector<uint8_t> payload(static_cast<size_t>(bytes), 0x7F);
  std::atomic<int64_t> done{0}, failed{0};
  for (int64_t i = 0; i < count; ++i) {
    (*transport)
        ->Send(*peer,
               absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(header.data()), header.size()),
               payload.data(), payload.size(), [&](absl::Status s) {
                 if (!s.ok()) ++failed;
                 ++done;
               });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (done.load() < count && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  if (hold) {
    std::cout << "sent; holding" << std::endl;
    for (;;) absl::SleepFor(absl::Seconds(1));
  }
  (*transport)->Shutdown();
  if (done.load() < count || failed.load() > 0) {
    std::cerr << "ucx_frame_sender: " << done.load() << " of " << count << " sends completed, "
              << failed.load() << " failed\n";
    return 1;
  }
  return 0;
}
