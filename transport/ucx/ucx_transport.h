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
//
// Example:
//   absl::StatusOr<std::unique_ptr<UcxTransport>> t = UcxTransport::Create({});
//   PeerId server = *(*t)->Connect(server_ucx_address);
#ifndef TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_options.h"

namespace tessel {

namespace ucx_internal {
struct PendingOp;  // a send or receive UCX holds (ucx_transport.cc)
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

 private:
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool failed = false;
    bool owned = true;  // created by Connect (closed by us) vs. a reply endpoint
  };

  explicit UcxTransport(const UcxOptions& options);
  absl::Status Init();
  // False once shutting down (the task will never run).
  bool Post(std::function<void()> task);
  void Loop();
  bool RunTasks();

  // Progress-thread only (and Init/Shutdown, before and after the thread).
  // CreateWorker makes the UCX worker that peers send to, with its handlers,
  // event fd and the probe endpoint; DestroyWorker closes its endpoints,
  // destroys it and ends what was in flight with `why`.
  absl::Status CreateWorker();
  void DestroyWorker(const absl::Status& why);
  PeerId PeerForEp(ucp_ep_h ep);
  void DoSend(PeerId to, std::vector<uint8_t> header, const void* payload, size_t bytes,
              SendDone done);
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnProbe(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);

  const UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  // A second worker in this process that sends CheckReceiveQueue's probes
  // to worker_ through the same transports a peer on this host would use.
  ucp_worker_h probe_worker_ = nullptr;
  ucp_ep_h probe_ep_ = nullptr;
  int probes_pending_ = 0;  // probe sends UCX still holds (progress thread)
  Handler handler_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  int ucp_fd_ = -1;

  // Progress-thread state.
  std::vector<Peer> peers_;
  absl::flat_hash_map<ucp_ep_h, PeerId> peer_by_ep_;
  // Sends and receives UCX still holds (SendOp/RecvOp). A peer that died
  // never completes them; Shutdown cancels what is left, so every `done`
  // runs once and nothing leaks.
  absl::flat_hash_set<ucx_internal::PendingOp*> in_flight_;

  mutable absl::Mutex address_mu_;
  std::string address_ ABSL_GUARDED_BY(address_mu_);

  absl::Mutex probe_mu_;
  uint64_t probe_seen_ ABSL_GUARDED_BY(probe_mu_) = 0;
  std::atomic<uint64_t> probe_seq_{0};

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_UCX_TRANSPORT_H_
