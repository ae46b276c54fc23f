// In-process transport: endpoints in one process exchange messages through a
// shared Fabric. For unit tests of everything above the transport; it obeys
// the same contract as the UCX backend (same conformance suite).
//
// Each endpoint has its own progress thread; a send runs the receiver's
// handler on the receiver's thread, copies the payload into the destination
// it chose, then completes the send on the sender's thread. Endpoints may be
// destroyed while messages to or from them are queued (a worker or server
// stopping in a test): the payload is copied when the send is queued, and a
// peer is reached through the fabric by address, never by a pointer that may
// be stale.
//
// Payload memory: blocks kept alive by reference, so a payload inside one is
// not copied when sent: the receiver sees it in place (Incoming::in_place)
// and may borrow it, as over UCX's shared memory.
//
// Example:
//   auto fabric = std::make_shared<InProcFabric>();
//   auto a = InProcTransport::Create(fabric);
//   auto b = InProcTransport::Create(fabric);
//   PeerId to_b = *a->Connect(b->address());
#ifndef TESSEL_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
#define TESSEL_TRANSPORT_INPROC_INPROC_TRANSPORT_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "transport/transport.h"

namespace tessel {

class InProcTransport;
class InProcMemory;

// Address book shared by the endpoints of one test.
class InProcFabric {
 public:
  std::string Register(InProcTransport* t);
  void Unregister(const std::string& address);
  InProcTransport* Find(const std::string& address);
  // Queues `task` on the endpoint at `address` if it is still `expected`
  // (registered; not shut down): under the fabric's lock, so the endpoint
  // cannot go away in between. False if it is gone.
  bool PostTo(const std::string& address, InProcTransport* expected, std::function<void()> task);

 private:
  absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, InProcTransport*> endpoints_ ABSL_GUARDED_BY(mu_);
};

class InProcTransport : public Transport {
 public:
  static std::unique_ptr<InProcTransport> Create(std::shared_ptr<InProcFabric> fabric);
  ~InProcTransport() override;

  std::string address() const override { return address_; }
  void SetHandler(Handler handler) override;
  absl::StatusOr<PeerId> Connect(absl::string_view address) override;
  void Send(PeerId to, absl::Span<const uint8_t> header, const void* payload, size_t payload_bytes,
            SendDone done) override;
  void Shutdown() override;
  std::string name() const override { return "inproc"; }
  std::shared_ptr<PayloadMemory> payload_memory() override;
  void Release(PeerId from, uint64_t lease) override;
  std::string PayloadPath(PeerId peer) override;

 private:
  friend class InProcFabric;  // PostTo
  explicit InProcTransport(std::shared_ptr<InProcFabric> fabric);
  void Post(std::function<void()> task);
  void Loop();
  // Receiver side: runs on this endpoint's thread.
  // `block` (payload memory) holds `in_place`; else `copy` holds the bytes.
  void Deliver(InProcTransport* sender, const std::string& sender_address,
               std::vector<uint8_t> header, std::shared_ptr<const std::vector<uint8_t>> copy,
               std::shared_ptr<const void> block, const void* in_place, size_t bytes,
               SendDone done);
  PeerId PeerFor(InProcTransport* t, const std::string& address);
  // A payload-memory payload moved to or from `peer` in place (PayloadPath).
  void MarkInPlace(PeerId peer);

  std::shared_ptr<InProcFabric> fabric_;
  std::shared_ptr<InProcMemory> memory_;
  std::string address_;
  Handler handler_;  // set before traffic; read on the progress thread

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // PeerId = index: the endpoint (compared, never dereferenced) and its address.
  std::vector<std::pair<InProcTransport*, std::string>> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> in_place_peers_ ABSL_GUARDED_BY(mu_);  // by PeerId: a payload moved in place
  // Borrowed payloads by lease (progress thread).
  struct Borrow {
    std::shared_ptr<const void> block;
    InProcTransport* sender;
    std::string sender_address;
    SendDone done;
    PeerId from;  // Release must name it
  };
  absl::flat_hash_map<uint64_t, Borrow> borrowed_;
  uint64_t next_lease_ = 1;
  std::thread thread_;
};

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
