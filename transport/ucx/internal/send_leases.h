// SendLeases: payloads sent in place (as descriptors) that their receiver has
// not released yet, by lease number. Each lease keeps what it takes to send
// the payload again through the queues (a receiver that cannot map it asks
// for that) and the sender's `done`, which runs once: when the RELEASE
// comes, when the descriptor's own send fails, or when the worker goes.
//
// A lease belongs to the peer it was sent to: a RELEASE ends it only when it
// comes from that peer (TakeFrom), so another process cannot end a send
// early while its receiver still reads the payload in place. Lease numbers
// are random 64-bit values from the kernel (getrandom), never 0 and unique
// among those held, so they cannot be guessed from earlier ones either.
//
// Threads: none and no lock: the owner's progress thread makes every call.
//
// Example (UcxTransport):
//   const uint64_t lease = leases.Open({to, std::move(done), header, payload, bytes});
//   ...send a descriptor naming `lease`; if that send fails: leases.End(lease, s)...
//   std::optional<SendLeases::Lease> l = leases.TakeFrom(release.lease, from);  // RELEASE
//   if (l && l->done) l->done(absl::OkStatus());
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_SEND_LEASES_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_SEND_LEASES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "transport/transport.h"

namespace tessel {
namespace ucx_internal {

class SendLeases {
 public:
  struct Lease {
    PeerId peer = 0;
    SendDone done;
    std::vector<uint8_t> header;
    const void* payload = nullptr;
    size_t bytes = 0;
  };

  // Holds `lease` until TakeFrom, End or TakeAll; its number (random, not 0,
  // not that of another lease held).
  uint64_t Open(Lease lease);
  // The lease, no longer held, if it is held and was sent to `peer`;
  // nullopt otherwise (a lease of another peer stays held, and the refusal
  // is counted in misdirected()).
  std::optional<Lease> TakeFrom(uint64_t lease, PeerId peer);
  // Ends `lease` with `status` (its done runs) if it is still held.
  void End(uint64_t lease, const absl::Status& status);
  // Every lease held, no longer held (the worker goes: the caller ends them
  // once it is gone).
  std::vector<Lease> TakeAll();
  size_t size() const { return held_.size(); }
  // RELEASEs refused because they named a lease of another peer.
  uint64_t misdirected() const { return misdirected_; }

 private:
  absl::flat_hash_map<uint64_t, Lease> held_;
  uint64_t misdirected_ = 0;
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_SEND_LEASES_H_
