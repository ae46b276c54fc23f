// WedgeJudge: whether a receive-queue probe that came late (WedgeProbe::Await
// timed out) means the queue is wedged or only loaded. It keeps the evidence
// the progress thread gathers and judges from progress, not from the clock
// alone: a late probe is a wedge only if the probe left, the progress thread
// then made two whole passes over the worker (it was not starved of CPU),
// and the queue did not move: nothing arrived from any peer whose messages
// take the probe's path (the same active-message transport), and, where
// that path is not shared memory, the worker did no work at all (a large
// payload over tcp moves for a long while before it is delivered). A
// saturated queue keeps moving and is never judged wedged; a wedged
// shared-memory FIFO delivers nothing from this host, whatever peers on
// other hosts send over tcp.
//
// Threads: SetProbePath, OnProbePath, Pass, Delivered and ProbeSent on the
// progress thread (which owns the worker); Movement, HadChances, Judge and
// the counts from any thread (atomics).
//
// Example (UcxTransport::CheckReceiveQueue):
//   const uint64_t before = judge.Movement();
//   loop->Post([&] { probe->Send(seq); judge.ProbeSent(); });
//   absl::Status probe_status = probe->Await(seq, timeout);
//   while (!probe_status.ok() && !judge.HadChances(probe->Sent(seq))) ...wait more...
//   return judge.Judge(probe_status, probe->Sent(seq), before, timeout);
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_JUDGE_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_JUDGE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tessel {
namespace ucx_internal {

class WedgeJudge {
 public:
  // The probe's active-message transports ("posix", "tcp"...), as UCX chose
  // them for the probe's endpoint (a new worker: the evidence starts again).
  void SetProbePath(std::vector<std::string> am_transports);
  // Whether a peer whose active messages take `am_transports` shares one
  // with the probe (its messages show the probed queue moving).
  bool OnProbePath(const std::vector<std::string>& am_transports) const;

  // One pass of the progress thread over the worker; `did_work` if the
  // worker progressed anything.
  void Pass(bool did_work);
  // A message (or a rendezvous payload) arrived from a peer on the probe's
  // path.
  void Delivered() { deliveries_.fetch_add(1, std::memory_order_relaxed); }
  // The probe was handed to UCX: its chances are counted from this pass.
  void ProbeSent() { sent_at_pass_.store(passes_.load()); }

  // The queue's movement so far (deliveries on the probe's path, and work
  // rounds where that path is not shared memory): compare two readings.
  uint64_t Movement() const { return deliveries_.load() + work_.load(); }
  // Whether the progress thread has had its chances at a probe that was
  // `sent`: two whole passes since.
  bool HadChances(bool sent) const { return sent && passes_.load() >= sent_at_pass_.load() + 2; }
  // The verdict once the waiting is over: `probe` (the probe's error) if it
  // is still missing, the thread had its chances and nothing moved since
  // `movement_before` (wedged); OK otherwise, counting a late probe as load
  // (starved or moving) and saying so in the log (rate-limited).
  absl::Status Judge(const absl::Status& probe, bool sent, uint64_t movement_before,
                     absl::Duration timeout);

  // Late probes judged load: the busy progress thread had not had its
  // chances, or the queue moved meanwhile (or the probe arrived late).
  uint64_t late_starved() const { return late_starved_.load(); }
  uint64_t late_moving() const { return late_moving_.load(); }

 private:
  // Progress thread only.
  std::vector<std::string> probe_am_;
  bool probe_on_shm_ = false;
  std::atomic<uint64_t> deliveries_{0};
  std::atomic<uint64_t> work_{0};  // rounds that did work, when the probe is not on shm
  std::atomic<uint64_t> passes_{0};
  std::atomic<uint64_t> sent_at_pass_{0};
  std::atomic<uint64_t> late_starved_{0};
  std::atomic<uint64_t> late_moving_{0};
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_WEDGE_JUDGE_H_
