// Transport: moves framed bytes between endpoints. Knows nothing of servers,
// workers, jobs or strategies (see DESIGN.md dependency rules).
//
// A message is a small header (copied by the transport) and a payload (not
// copied: the sender keeps it valid and unchanged until its `done` runs; the
// receiver chooses where the payload lands, so large payloads move straight
// into their destination without intermediate copies).
//
// Threads: every transport runs one internal thread (the progress thread).
// The receive handler, `Accept::done` and send completions all run on it and
// must not block; they may call Send(). Send() and Connect() are thread-safe.
//
// Payload memory (zero-copy): a payload that lies inside memory from
// payload_memory() may be sent as a small descriptor instead of bytes; the
// receiver then reads it where the sender keeps it (UCX: shared memory
// mapped into both processes with ucp_rkey_ptr; where mapping is impossible,
// e.g. across hosts, it goes through the queues as before). The sender's
// `done` runs once the receiver no longer needs the payload, so "keep the
// payload unchanged until done" is all a sender must know. A receiver may
// borrow such a payload (Accept::borrow): it reads Incoming::in_place after
// its handler returned, and calls Release() when it is done.
//
// Example:
//   transport->SetHandler([&](const Incoming& in) {
//     if (in.payload_bytes != sizeof(buffer)) return Accept{};  // not what we expect
//     return Accept{buffer, sizeof(buffer), [](absl::Status s) { /* payload is in buffer */ }};
//   });
//   absl::StatusOr<PeerId> peer = transport->Connect(remote_address);
//   transport->Send(*peer, header_bytes, data, size, [](absl::Status s) {});
#ifndef TESSEL_TRANSPORT_TRANSPORT_H_
#define TESSEL_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tessel {

// Names a remote endpoint within one transport. Obtained from Connect() or
// from Incoming::from (which replies to the sender).
using PeerId = uint64_t;

struct Incoming {
  PeerId from = 0;
  absl::Span<const uint8_t> header;  // valid only during the handler call
  size_t payload_bytes = 0;
  // Non-null when the payload can be read where the sender keeps it (its
  // payload memory, mapped into this process). Valid during the handler
  // call, and after it until Release(from, lease) when the handler borrows.
  const void* in_place = nullptr;
  uint64_t lease = 0;
};

// The status of a payload a transport dropped because it is larger than the
// Accept::capacity its receiver gave (one place for every backend's message).
inline absl::Status PayloadTooLarge(size_t payload_bytes, size_t capacity) {
  return absl::OutOfRangeError(absl::StrCat("dropped a payload of ", payload_bytes,
                                            " bytes: its receiver has room for ", capacity));
}

// The receiver's decision about an incoming payload.
struct Accept {
  // Where the payload_bytes land. nullptr drops the payload (the message is
  // refused; `done` is not called). Ignored when payload_bytes == 0.
  void* dst = nullptr;
  // Bytes available at `dst`. The transport writes at most this many: a
  // payload larger than `capacity` is dropped (nothing is written, `done`
  // runs with OutOfRange) whatever the handler decided. Defence in depth:
  // handlers check Incoming::payload_bytes themselves first. Placed second
  // so that an Accept{dst, done} that forgets it does not compile.
  size_t capacity = 0;
  // Called once the payload is in `dst` (OK) or could not be received.
  std::function<void(absl::Status)> done;
  // Only when Incoming::in_place is set: the receiver keeps reading the
  // payload there after the handler returns and calls Release(from, lease)
  // once it no longer needs it; the sender's `done` runs then. `dst` and
  // `done` are ignored. (Borrowing without in_place refuses the message.)
  bool borrow = false;
};

// Memory for payloads that a transport can move without copying them
// through its queues. Shared by the transport and everything allocated from
// it, so memory may outlive the transport (it is unmapped last).
class PayloadMemory {
 public:
  virtual ~PayloadMemory() = default;
  // `bytes` of zeroed memory, or nullptr (the caller falls back to ordinary
  // memory, whose payloads are copied as usual).
  virtual void* Allocate(size_t bytes) = 0;
  // False if `p` did not come from Allocate (the caller frees it itself).
  virtual bool Free(void* p) = 0;
};

using SendDone = std::function<void(absl::Status)>;

// How long a CheckReceiveQueue probe may take before the queue counts as
// wedged, wherever Tessel probes (shard servers' --receive_check_timeout_ms
// default, workers' and hybrid meshes' recoveries).
inline constexpr absl::Duration kReceiveQueueProbeTimeout = absl::Seconds(3);

class Transport {
 public:
  using Handler = std::function<Accept(const Incoming&)>;

  virtual ~Transport() = default;

  // Opaque bytes another transport of the same kind passes to Connect().
  virtual std::string address() const = 0;

  // Installs the receive handler. Call once, before any peer can send.
  virtual void SetHandler(Handler handler) = 0;

  // Connects to a remote address (blocks until the endpoint exists).
  virtual absl::StatusOr<PeerId> Connect(absl::string_view address) = 0;

  // Queues a message. `header` is copied; `payload` must stay valid until
  // `done` runs (on the progress thread) with the outcome.
  virtual void Send(PeerId to, absl::Span<const uint8_t> header, const void* payload,
                    size_t payload_bytes, SendDone done) = 0;

  // Stops the progress thread and releases endpoints. Pending operations
  // complete with a Cancelled status. Idempotent; the destructor calls it.
  virtual void Shutdown() = 0;

  // Short name for logs and benchmarks, e.g. "ucx" or "inproc".
  virtual std::string name() const = 0;

  // Where payloads live so that sends can skip copies (see the top of this
  // file); nullptr if this transport always copies.
  virtual std::shared_ptr<PayloadMemory> payload_memory() { return nullptr; }

  // Ends a borrow (Accept::borrow): the sender's `done` runs. Any thread;
  // a no-op after Shutdown or Reset (the sender learns from its own side).
  virtual void Release(PeerId from, uint64_t lease) {
    (void)from;
    (void)lease;
  }

  // How payloads from payload memory move between this endpoint and `peer`,
  // in either direction, as chosen when it connected (and changed if the
  // peer then could not map them): "in place" (mapped shared memory), or
  // "copied" with how (UCX: "copied (rendezvous by RMA over cma)",
  // "copied (active messages over sysv)"). For logs and benchmarks.
  virtual std::string PayloadPath(PeerId peer) {
    (void)peer;
    return "copied";
  }

  // Memory kinds besides host memory this transport can send from and
  // receive into, as its library names them (UCX: "cuda", "cuda-managed",
  // "rocm"...: ucp_context_query's memory types, which a UCX built with
  // cuda_copy/cuda_ipc reports). Empty: host memory only. Reported by GPU
  // workers, which stage through host memory either way (docs/gpu.md).
  virtual std::vector<std::string> DeviceMemoryTypes() const { return {}; }

  // Sends a probe into this transport's own receive queue, from a second
  // endpoint in this process, and waits up to `timeout` for it to arrive.
  // FailedPrecondition means the queue is wedged: nothing sent to this
  // address will ever be received again. (UCX shared memory: a peer killed
  // in the middle of writing a message into the receive FIFO leaves a slot
  // claimed but never filled, and the FIFO is read strictly in order.) The
  // cure is Reset(). Transports that cannot wedge return OK. Load is not a
  // wedge: a probe that is late while messages keep arriving through the
  // path it takes (or that the busy progress thread has not even sent yet)
  // is OK.
  virtual absl::Status CheckReceiveQueue(absl::Duration timeout) {
    (void)timeout;
    return absl::OkStatus();
  }

  // Replaces this endpoint with a fresh one at a new address(): every
  // PeerId connected or seen so far fails its sends (Unavailable), every
  // operation in flight completes with Unavailable, and the handler stays.
  // Peers must Connect() to the new address; replies to senders work as
  // before.
  virtual absl::Status Reset() {
    return absl::UnimplementedError(name() + " transport cannot be reset");
  }
};

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_TRANSPORT_H_
