// UCX transport: the data path between processes (and hosts).
//
// Messages are UCX active messages (`ucp_am_send_nbx`). Small payloads go
// eagerly; large ones use UCX's rendezvous protocol and are received with
// `ucp_am_recv_data_nbx` straight into the destination the handler chose, so
// gradients land in the server's per-rank buffers and parameters in the
// worker's parameter vector with no intermediate copy. Every send asks for a
// reply endpoint, so a receiver can answer without connecting back.
//
// Threads: one progress thread owns the UCX worker (UCS_THREAD_MODE_SINGLE);
// Send/Connect from other threads are handed over through a queue. The thread
// polls, yielding, while there is traffic and for `spin` after it, then
// sleeps on the worker's event fd (UCP_FEATURE_WAKEUP) so idle processes use
// no CPU.
//
// Payload memory (zero-copy): payload_memory() allocates with
// ucp_mem_map(ALLOCATE), which on one host is a shared-memory segment. A
// payload of at least in_place_min_bytes inside it is sent as a descriptor
// (region, offset, size and the packed rkey; a small active message). The
// receiver unpacks the rkey once per sender endpoint and region (cached:
// least recently used evicted past 16 per endpoint, and any unused for 30 s
// dropped, so a peer that went away does not keep its memory mapped here)
// and maps the region with ucp_rkey_ptr. The handler sees
// Incoming::in_place and may borrow it, or the transport copies it into
// Accept::dst (one copy, by the receiver); then the receiver sends a
// RELEASE message and the sender's `done` runs.
//
// The path is chosen per endpoint when it is made (Connect, or the first
// message from a peer), from the lanes UCX picked (ucp_ep_print_info):
// descriptors only where a lane is posix, sysv or xpmem (memory that maps);
// otherwise payloads go as active messages, which UCX's rendezvous moves by
// RMA on the endpoint's rma_bw lanes when there are any (a cma or rc get, a
// tcp put: straight from the sender's buffer into Accept::dst, one copy),
// and through its queues when there are none. PayloadPath reports it:
// "in place", "copied (rendezvous by RMA over cma)", "copied (active
// messages over sysv)". If mapping still fails (e.g. another pod's shared
// memory), the RELEASE asks for the payload again and every later payload
// to that peer goes the copied way. A Reset keeps the old UCX worker until
// borrows of regions mapped through it end; Shutdown ends them all (stop
// reading first).
//
// Error handling: on one host UCX 1.13.1 offers shared memory only with
// UCP_ERR_HANDLING_MODE_NONE (docs/architecture.md, "Data path"). The default
// is NONE; dead peers are found by registry leases and by deadlines on every
// wait above this layer. `peer_error_handling = true` selects PEER mode
// (tcp only on one host, about half the bandwidth) and fails sends to a dead
// peer with Unavailable.
//
// A peer killed in the middle of writing into this process's shared-memory
// receive FIFO wedges it for good (UCX reads the FIFO strictly in order).
// CheckReceiveQueue() finds that with a probe from a second UCX worker in
// this process; Reset() cures it with a fresh UCX worker at a new address.
// A late probe is judged from progress, not from the clock alone
// (WedgeJudge): a saturated queue keeps moving and is never reset.
//
// Parts, each with its own contract and test (transport/ucx/internal/):
// ProgressLoop (the thread, its queue, eventfd and spin-then-sleep),
// UcxContext and UcxPayloadMemory (the UCP context, registered payload
// regions), InFlight (the sends and receives UCX holds), RemoteKeyCache
// (peers' regions unpacked and mapped here, and borrows), the descriptor
// codec (DESCRIPTOR and RELEASE on the wire), SendLeases (descriptor sends
// until their RELEASE), WedgeProbe and WedgeJudge (CheckReceiveQueue) and
// ParseEpInfo (lanes -> path). This class keeps the peers, the endpoints and
// the message handlers (ucx_transport.cc; the zero-copy ones, DESCRIPTOR and
// RELEASE, in ucx_zero_copy.cc).
//
// Example:
//   absl::StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create({});
//   PeerId server = *(*t)->Connect(server_ucx_address);
#ifndef TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "runtime/spin_budget.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_options.h"

namespace tessel {

// Private parts (transport/ucx/internal/).
namespace ucx_internal {
class ProgressLoop;                  // the progress thread, its queue and pacing
class UcxContext;                    // the UCP context
class UcxPayloadMemory;              // payload_memory()
class RemoteKeyCache;                // peers' regions unpacked and mapped here
class WedgeProbe;                    // CheckReceiveQueue's probe
class WedgeJudge;                    // its verdict: wedged, or load
class InFlight;                      // the sends and receives UCX holds
class SendLeases;                    // descriptor sends until RELEASE
enum class ReleaseStatus : uint8_t;  // descriptor_codec.h
}  // namespace ucx_internal

class UcxTransport : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(const UcxOptions& options);
  ~UcxTransport() override;

  std::string address() const override;
  void SetHandler(Handler handler) override;
  absl::StatusOr<PeerId> Connect(absl::string_view address) override;
  void Send(PeerId to, absl::Span<const uint8_t> header, const void* payload, size_t payload_bytes,
            SendDone done) override;
  void Shutdown() override;
  std::string name() const override { return "ucx"; }
  absl::Status CheckReceiveQueue(absl::Duration timeout) override;
  absl::Status Reset() override;
  std::shared_ptr<PayloadMemory> payload_memory() override;
  void Release(PeerId from, uint64_t lease) override;
  std::string PayloadPath(PeerId peer) override;
  std::vector<std::string> DeviceMemoryTypes() const override { return device_memory_types_; }

  // Probes that were late but judged load, not a wedge (CheckReceiveQueue):
  // the busy progress thread had not yet sent the probe and made two passes
  // over the worker after it, or the queue moved meanwhile (or the probe
  // arrived while waiting for those passes).
  struct LateProbes {
    uint64_t starved = 0;
    uint64_t moving = 0;
    uint64_t total() const { return starved + moving; }
  };
  LateProbes late_probes() const;

  // Bounds on what peers can make this transport keep (issue 42):
  // endpoints it exchanges messages with at once (a message from a new
  // endpoint beyond this is dropped, and counted), and endpoints made for
  // HELLOs that UCX did not pair with the endpoint they came on (kept until
  // shutdown; a HELLO beyond this dials nothing). A HELLO is taken once per
  // endpoint.
  static constexpr size_t kMaxPeers = 16384;
  static constexpr size_t kMaxSpareEndpoints = 64;

  // What this transport refused from its peers, since it was made.
  struct Refusals {
    uint64_t oversized = 0;             // payloads larger than their Accept::capacity
    uint64_t descriptors = 0;           // malformed, outside their region, or re-describing one
    uint64_t releases = 0;              // RELEASEs from an endpoint that is no peer
    uint64_t misdirected_releases = 0;  // RELEASEs naming another peer's lease
    uint64_t hellos = 0;                // HELLOs repeated or beyond kMaxSpareEndpoints
    uint64_t peers = 0;                 // messages from a new endpoint beyond kMaxPeers
  };
  Refusals refusals() const;

 private:
  static constexpr PeerId kNoPeerId = ~PeerId{0};
  // A remote endpoint, by PeerId (an index into peers_).
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool failed = false;
    bool owned = true;  // created by Connect (closed by us) vs. a reply endpoint
    // A reply endpoint this transport took over once the peer said its
    // address (HELLO): UCX keeps it until we close it and reports its failure.
    bool adopted = false;
    // Our address is still to be said to it (HELLO, before the first send).
    bool hello = false;
    // How payload-memory payloads move to or from this peer (PayloadPath):
    // chosen at connect time, "copied" if the peer then cannot map them.
    std::string path = "copied";
    // The copied path's description (DescribeCopied of the lanes).
    std::string copied = "copied";
    // Send payload memory as descriptors (until the peer says it cannot map it).
    bool in_place = true;
    // Its messages arrive through the active-message transport the wedge
    // probe uses (so they show that the probed queue moves).
    bool on_probe_path = false;
  };
  explicit UcxTransport(const UcxOptions& options);
  absl::Status Init();

  // Progress-thread only (and Init/Shutdown, before and after the thread).
  // CreateWorker makes the UCX worker that peers send to, with its handlers,
  // event fd and the probe endpoint; DestroyWorker closes its endpoints,
  // destroys it and ends what was in flight with `why`.
  absl::Status CreateWorker();
  void DestroyWorker(const absl::Status& why);
  bool Progress();
  Peer NewPeer(ucp_ep_h ep, bool owned) const;
  PeerId PeerForEp(ucp_ep_h ep);
  // A message from `from` arrived: the probed queue moved if it came the
  // probe's way.
  void Delivered(PeerId from);
  void DoSend(PeerId to, std::vector<uint8_t> header, const void* payload, size_t bytes,
              SendDone done);
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // A connecting peer's address (HELLO), sent by Connect: the receiver takes
  // over the reply endpoint it arrived on (Adopt). UCX 1.13 destroys a reply
  // endpoint nobody took over when its peer fails, so answering a dead peer
  // through one used freed memory.
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  void SendHello(ucp_ep_h ep);
  void Adopt(ucp_ep_h reply, const std::string& address);
  static ucs_status_t OnDescriptor(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnRelease(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param);
  // Sender side: false unless `payload` lies in payload memory.
  bool SendDescriptor(PeerId to, std::vector<uint8_t>& header, const void* payload, size_t bytes,
                      SendDone& done);
  // Receiver side: tells the sender of `lease` its payload is no longer needed.
  void SendRelease(PeerId to, uint64_t lease, ucx_internal::ReleaseStatus status);

  const UcxOptions options_;  // with the environment applied (Create)
  std::shared_ptr<ucx_internal::UcxContext> context_;
  std::shared_ptr<ucx_internal::UcxPayloadMemory> memory_;
  std::vector<std::string> device_memory_types_;  // Init: the context's, but host
  std::unique_ptr<SpinPolicy> spin_policy_;       // outlives loop_, which asks it
  std::unique_ptr<ucx_internal::ProgressLoop> loop_;
  std::unique_ptr<ucx_internal::WedgeProbe> probe_;

  // Progress-thread state (Init's and Shutdown's thread before and after).
  ucp_worker_h worker_ = nullptr;  // null after a failed Reset
  int ucp_fd_ = -1;                // worker_'s event fd, watched by loop_
  Handler handler_;
  std::vector<Peer> peers_;
  absl::flat_hash_map<ucp_ep_h, PeerId> peer_by_ep_;
  // Sends and receives UCX still holds. A peer that died never completes
  // them; DestroyWorker cancels what is left, so every `done` runs once.
  std::unique_ptr<ucx_internal::InFlight> in_flight_;
  // Descriptor sends by lease, until RELEASE (or the worker goes).
  std::unique_ptr<ucx_internal::SendLeases> leases_;
  // Peers' regions unpacked here, and the payloads borrowed through them.
  std::unique_ptr<ucx_internal::RemoteKeyCache> keys_;

  mutable absl::Mutex address_mu_;
  std::string address_ ABSL_GUARDED_BY(address_mu_);
  std::atomic<bool> shut_down_{false};
  // Endpoints Adopt made that UCX did not pair with the peer's (closed at
  // shutdown).
  std::vector<ucp_ep_h> spare_eps_;
  // Reply endpoints a HELLO came on (one each).
  absl::flat_hash_set<ucp_ep_h> hello_eps_;
  // Refusals (written on the progress thread, read anywhere).
  std::atomic<uint64_t> dropped_oversized_{0};
  std::atomic<uint64_t> dropped_descriptors_{0};
  std::atomic<uint64_t> dropped_releases_{0};
  std::atomic<uint64_t> misdirected_releases_{0};
  std::atomic<uint64_t> refused_hellos_{0};
  std::atomic<uint64_t> refused_peers_{0};
  // The evidence CheckReceiveQueue judges a late probe on (Progress and
  // Delivered gather it), and the late probes judged load.
  std::unique_ptr<ucx_internal::WedgeJudge> judge_;
};

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_
