// InFlight: the UCX operations (active-message sends, rendezvous receives)
// a transport started and UCX still holds, each with a `done` that runs
// exactly once: with the outcome when UCX completes it (at once, for what
// UCX finishes inside the call), or with `why` from CancelAll, for what never
// will (a send towards a peer that died). So every `done` runs once and no
// operation leaks, even when a worker is reset or shut down.
//
// Threads: not thread-safe; the thread that progresses the UCX worker (the
// transport's progress thread) owns it, and UCX runs the completions there.
//
// Example:
//   InFlight ops;
//   ops.Send(ep, kAmId, std::move(header), payload, bytes, std::move(done));
//   ops.Receive(worker, data, dst, length, std::move(landed));   // in an AM handler
//   ...
//   ucp_worker_destroy(worker);  // completes (and removes) what it can
//   ops.CancelAll(absl::CancelledError("shut down"));
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_IN_FLIGHT_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_IN_FLIGHT_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"

namespace tessel {
namespace ucx_internal {

struct PendingOp;  // in_flight.cc

class InFlight {
 public:
  using Done = std::function<void(absl::Status)>;

  InFlight() = default;
  ~InFlight();  // CancelAll(Cancelled)
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  // Sends `header` (kept alive until UCX is done with it: UCX 1.13 has no
  // COPY_HEADER) and `payload` (the caller keeps it until `done`) as active
  // message `id` on `ep`, asking for a reply endpoint.
  void Send(ucp_ep_h ep, unsigned id, std::vector<uint8_t> header, const void* payload,
            size_t bytes, Done done);
  // Receives the rendezvous data `data` (from an active-message handler) of
  // `length` bytes into `dst` on `worker`.
  void Receive(ucp_worker_h worker, void* data, void* dst, size_t length, Done done);

  // Ends every operation still held with `why`. Call after the worker that
  // held them is destroyed (or will never be progressed again): UCX must not
  // complete them later.
  void CancelAll(const absl::Status& why);

  size_t size() const { return ops_.size(); }

 private:
  // Starts `op` with `call` (the UCX call, whose callback completes `op`):
  // lists it, and ends it at once if UCX finished it inside the call.
  void Start(PendingOp* op, const std::function<ucs_status_ptr_t()>& call, const char* what);

  absl::flat_hash_set<PendingOp*> ops_;
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_IN_FLIGHT_H_
