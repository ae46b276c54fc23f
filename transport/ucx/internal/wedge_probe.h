// WedgeProbe: tells whether a UCX worker's receive queue is wedged. A peer
// on this host killed in the middle of writing a message into the worker's
// shared-memory receive FIFO leaves a slot claimed but never filled, and UCX
// reads the FIFO strictly in order: nothing sent to that worker is received
// again. The probe is a second UCX worker in this process with an endpoint
// to the target worker, through the transports a peer on this host would
// use; a probe message sent through it that does not arrive in time means
// the queue is wedged (the cure is a fresh worker: UcxTransport::Reset).
//
// Threads: Attach, Close, Send and Progress on the thread that owns the
// target worker (the transport's progress thread), which also runs the probe
// handler Attach installs; NextSeq and Await from any thread.
//
// Example (transport):
//   TESSEL_ASSIGN_OR_RETURN(probe_, WedgeProbe::Create(context));
//   probe_->Attach(worker, address, kProbeAmId);       // progress thread
//   uint64_t seq = probe_->NextSeq();
//   loop->Post([=] { probe_->Send(seq); });            // Progress() polls it out
//   absl::Status s = probe_->Await(seq, absl::Seconds(2));  // FailedPrecondition: wedged
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_PROBE_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_PROBE_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessel {
namespace ucx_internal {

class WedgeProbe {
 public:
  // Makes the probe's own worker on `context`.
  static absl::StatusOr<std::unique_ptr<WedgeProbe>> Create(ucp_context_h context);
  ~WedgeProbe();  // destroys the probe worker (Close the endpoint first)
  WedgeProbe(const WedgeProbe&) = delete;
  WedgeProbe& operator=(const WedgeProbe&) = delete;

  // Probes `target` (at `target_address`) from now on: installs the probe
  // handler for active message `am_id` on it and connects to it.
  absl::Status Attach(ucp_worker_h target, const std::string& target_address, unsigned am_id);
  // Force-closes the endpoint Attach made: the close request to complete by
  // progressing worker() (ucp_request_free it then), or nullptr if done.
  void* Close();
  ucp_worker_h worker() const { return worker_; }
  // The endpoint Attach made (nullptr before and after Close); owner thread.
  ucp_ep_h ep() const { return ep_; }

  // The number of the next probe (increasing from 1).
  uint64_t NextSeq() { return seq_.fetch_add(1) + 1; }
  // Sends probe `seq` to the target; a no-op when not attached.
  void Send(uint64_t seq);
  // Whether Send(seq) (or a later probe's) was handed to UCX; any thread.
  bool Sent(uint64_t seq) const { return sent_.load() >= seq; }
  // Progresses the probe worker while a probe send is pending (an eager
  // probe completes at once, so it stays off the data path otherwise);
  // true if anything happened.
  bool Progress();

  // OK once probe `seq` (or a later one) arrived; FailedPrecondition, saying
  // the queue is wedged, if it did not within `timeout`.
  absl::Status Await(uint64_t seq, absl::Duration timeout);

 private:
  explicit WedgeProbe(ucp_worker_h worker) : worker_(worker) {}
  static ucs_status_t OnProbe(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);

  ucp_worker_h const worker_;
  ucp_ep_h ep_ = nullptr;  // owner thread
  int pending_ = 0;        // probe sends UCX still holds (owner thread)
  unsigned am_id_ = 0;
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> sent_{0};  // the highest probe handed to UCX
  absl::Mutex mu_;
  uint64_t seen_ ABSL_GUARDED_BY(mu_) = 0;  // the highest probe that arrived
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_PROBE_H_
