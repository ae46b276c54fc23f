// DataChannel: a worker's data-path endpoint towards its shard servers. It
// owns the Transport and one peer per shard, stamps and sends frames,
// counts what is in flight, keeps the first failure of the step (an ERROR
// frame, a failed send or receive), drops frames of an old epoch, and
// implements the one blocking wait every step uses (WaitFor). PARAMS and
// worker PUSH frames go to the installed FrameSink (BucketExchange or
// FsdpUnits), which decides where their payload lands.
//
// Contract:
//   - Frames carry (job, epoch, step, rank, shard, bucket) from JobContext;
//     an ERROR or failed transfer of another epoch than the current one is
//     ignored (a recovery moved on), counted in stale_dropped().
//   - No payload is taken at its sender's word: a frame whose payload is
//     not the size its header announces, or an ERROR whose text is longer
//     than kMaxErrorTextBytes, is dropped before anything is allocated or
//     a destination chosen, counted in refused() and logged at most every
//     10 s; a sink compares the header's size with what the job expects for
//     that bucket (or unit) and gives the transport the room it has
//     (Receive's `capacity`).
//   - With frame keys (SetFrameKeys: the servers authenticate frames; this
//     rank's keys for the epoch, runtime/rank_keys.h), every frame about
//     shard s to s is sealed with this rank's up key of s, and every frame to
//     a worker of this host group (host aggregation: PUSH, PULL, READY,
//     forwarded PARAMS) with the group's key of s. A frame that arrives must
//     be a PARAMS or ERROR under this rank's down key (a server's) or a
//     frame of another rank of the group under the group's key, of a key the
//     channel holds (this epoch and the last few); the rest is dropped,
//     counted in unauthenticated() and logged at most every 10 s.
//   - Where the shard tags payloads too (its grant's `payload`: the server's
//     --data_integrity=payload), every frame sent carries its payload's tag,
//     and the payload of every frame that arrives is checked against its
//     tag where it landed (Receive) or lies (in place, empty) before a sink
//     hears of it: a mismatch drops the frame (the sink's bucket stays
//     missing, as if the frame were lost), counted in bad_payload() (and in
//     unauthenticated(): a wrong tag) and logged at most every 10 s. A sender keeps the payload
//     unchanged until its send completes (as without tags).
//   - WaitFor returns OK once `done` holds, the first error otherwise
//     (recoverable when recovery is on), and DeadlineExceeded naming `what`
//     after step_timeout. It evaluates `done` at the start, after every
//     Notify() and every 250 ms; every 250 ms it also runs the periodic check
//     (lease, membership, servers: installed by the Worker).
//   - Ownership runs one way: a sink keeps its own state under its own lock
//     and tells the channel nothing but "something changed" (Notify); the
//     channel hands frames to the sink (FrameSink) and knows nothing of the
//     sink's state.
//
// Threads: the driving thread calls everything except OnFrame and the
// completions, which run on the transport's progress thread. The channel's
// counters and errors are under its own mutex (mu_), which it never holds
// while it calls out: FrameSink methods, a receive's `landed`, WaitFor's
// `done` and `what` and the periodic check run without it. So a sink may
// call the channel while it holds its own lock (lock order: sink, then
// channel), never the reverse.
//
// Example: a sink counts what lands under its own lock, and waits for it.
//   DataChannel channel(&ctx, std::move(transport));
//   channel.SetShards(1);
//   channel.SetPeer(0, *channel.transport().Connect(server_ucx_address));
//   channel.SetSink(&sink);  // sink.OnParams: return channel.Receive(dst, bytes, h.epoch,
//                            //   [&] { sink.CountLanded(); channel.Notify(); });
//   channel.Send(channel.Header(FrameType::kPull, step, 0, 0), nullptr);
//   TESSEL_RETURN_IF_ERROR(channel.WaitFor([&] { return sink.landed() == buckets; },
//                                          [] { return std::string("the pull"); }));
#ifndef TESSEL_WORKER_INTERNAL_DATA_CHANNEL_H_
#define TESSEL_WORKER_INTERNAL_DATA_CHANNEL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/grad_norm.h"
#include "core/wire.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "transport/transport.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

// Where the payload of a PARAMS (or worker PUSH) frame lands: the narrow
// interface through which the channel delivers frames. Runs on the progress
// thread, without the channel's lock.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A PARAMS frame of this job for an existing (shard, bucket), once the
  // layout is registered.
  virtual Accept OnParams(const FrameHeader& h) = 0;
  // A PUSH frame of this job from another worker of this host, for an
  // existing (shard, bucket): hierarchical aggregation (host_aggregator.h).
  // Dropped unless the sink aggregates. `in` says whether it can be read in
  // place (borrowed).
  virtual Accept OnPush(const FrameHeader& h, const Incoming& in) { return Accept{}; }
};

class DataChannel {
 public:
  // Installs itself as the transport's handler.
  DataChannel(JobContext* ctx, std::unique_ptr<Transport> transport);
  ~DataChannel();

  Transport& transport() { return *transport_; }
  void SetSink(FrameSink* sink) { sink_ = sink; }
  // Runs every 250 ms inside WaitFor, without the lock (driving thread).
  void SetPeriodicCheck(std::function<absl::Status()> check) { check_ = std::move(check); }

  // Peers: one per shard; kNoPeer until connected (sends to it fail).
  static constexpr PeerId kNoPeer = ~PeerId{0};
  void SetShards(int n) {
    peers_.assign(static_cast<size_t>(n), kNoPeer);
    addresses_.assign(static_cast<size_t>(n), std::string());
  }
  void SetPeer(int shard, PeerId peer) { peers_[static_cast<size_t>(shard)] = peer; }
  // Hierarchical aggregation: the endpoints of the other workers of this
  // host, by data-parallel rank (kNoPeer for the others).
  void SetWorkerPeers(std::vector<PeerId> peers) {
    absl::MutexLock lock(&mu_);
    worker_peers_ = std::move(peers);
  }
  // The shard's gRPC address, for messages.
  void SetAddress(int shard, std::string a) {
    addresses_[static_cast<size_t>(shard)] = std::move(a);
  }
  const std::string& address(int shard) const { return addresses_[static_cast<size_t>(shard)]; }
  int num_shards() const { return static_cast<int>(peers_.size()); }
  // Worker::data_path(): the transport's PayloadPath per shard.
  std::string DescribePaths();

  // A header of this worker for (type, step, shard, bucket); PUSH and INIT
  // get the bucket's payload size (PUSH in half under mixed precision).
  FrameHeader Header(FrameType type, int64_t step, int shard, int bucket) const;
  // Sends a frame to its shard; a failed send fails the step in progress.
  // `keep` (if any) is held until the send completes: the payload's owner.
  void Send(const FrameHeader& h, const void* payload, std::shared_ptr<const void> keep = nullptr);
  // Sends a frame to another worker of this host (SetWorkerPeers); a
  // failed send fails the step in progress.
  void SendToWorker(int rank, const FrameHeader& h, const void* payload);
  // The newest epoch a READY frame of `rank` (a worker of this host)
  // announced, -1 if none came.
  int64_t ReadyEpoch(int rank);
  // Whether `rank` (a worker of this host) sent a PULL for `version` (or
  // later) in the current epoch: it is past its backward pass, so the
  // parameters of `version` may land in its buffers.
  bool Pulled(int rank, int64_t version);
  // With a timeline: when the step's first push was sent (-1: none since the
  // last call), and forget it.
  int64_t TakeFirstPushUs() { return first_push_us_.exchange(-1); }
  // A held step's NORM answer from `shard` (server/step_hold.h): its stats
  // for (this epoch, `step`) once arrived, and forgotten; nullopt until then.
  std::optional<GradNormStats> TakeNorm(int shard, int64_t step);
  void WaitForSends();
  // Waits (up to the step timeout) until every send of this epoch to another
  // worker (SendToWorker) completed: the payloads may change then. Sends to
  // shards, and those of an older epoch, are not waited for (one to a process
  // that died may never complete).
  absl::Status WaitForWorkerSends();

  // `done` and `what` run on the calling thread without the channel's lock:
  // they read the caller's state under the caller's own lock.
  absl::Status WaitFor(const std::function<bool()>& done, const std::function<std::string()>& what);
  // A sink's state changed so that a WaitFor's `done` may hold now: wakes
  // the wait (any thread; without it the wait still looks every 250 ms).
  void Notify();

  // For sinks: a transfer into `dst` of `epoch`, counted in flight until it
  // completes. A failure while `epoch` is current fails the step's waits;
  // an arrival while it is current runs `landed` on the progress thread,
  // without the channel's lock (it may send). A recovery may begin between
  // that check and `landed`: the sink checks its own state again.
  // `capacity`: the bytes available at `dst` (the transport writes no more).
  Accept Receive(void* dst, size_t capacity, int64_t epoch, std::function<void()> landed);
  // A frame a sink dropped (stale, mis-sized, unknown): counted in
  // stale_dropped().
  void CountStale() { ++stale_dropped_; }

  // Forgets the step's failures (a recovery starts over).
  void ClearErrors();
  // Forgets a refusal or failed receive (a new pull starts), not a failed send.
  void ClearReceiveError();
  // Moves to a new fencing epoch: from here on, refusals and failed sends of
  // the old one are ignored.
  void SetEpoch(int64_t epoch);
  // Waits up to `limit` for receives in flight to land. True if some are
  // still in flight (from a dead or stalled server): the buffers they target
  // must never be read again (the sinks' Retire).
  bool SettleReceives(absl::Duration limit);
  int64_t inflight_receives();

  // Probes the receive queue; if it is wedged (transport/transport.h),
  // re-creates the endpoint. True if it did: every peer must reconnect.
  bool RenewIfWedged();
  int64_t endpoint_renewals() const { return endpoint_renewals_.load(); }
  int64_t stale_dropped() const { return stale_dropped_.load(); }

  // This rank's frame keys of the current epoch (ctx rank and epoch) from
  // each shard (an empty grant where that server does not authenticate
  // frames), num_shards() of them; InvalidArgument for a wrong count or
  // size. Before the first frame of an epoch is sent. The keys of the last
  // few epochs stay, for the refusals of frames sent before a recovery.
  absl::Status SetFrameKeys(const std::vector<FrameKeyGrant>& grants);
  // Whether any shard authenticates frames.
  bool authenticated();
  int64_t unauthenticated() const { return unauthenticated_.load(); }
  // Frames dropped for a payload size their header does not announce, or an
  // ERROR text over kMaxErrorTextBytes.
  int64_t refused() const { return refused_.load(); }
  // Frames dropped for a payload that does not match its tag.
  int64_t bad_payload() const { return bad_payload_.load(); }

  // A frame's payload tag to check its bytes against (payload tags on).
  struct PayloadCheck {
    std::shared_ptr<const RankFrameKeys> keys;
    std::array<uint8_t, kPayloadSealedHeaderBytes> header;
    FrameHeader h;
  };

 private:
  Accept OnFrame(const Incoming& in);
  // After authentication: a frame to its handler or sink by type.
  Accept Dispatch(const FrameHeader& h, const Incoming& in);
  // Whether `payload` matches the check's tag; counts and logs when not.
  bool Intact(const PayloadCheck& check, const void* payload);
  // Counts and logs (every 10 s at most) a frame refused for its size.
  Accept Refuse(const FrameHeader& h, const Incoming& in, absl::string_view why);
  void SendTo(PeerId peer, const FrameHeader& h, const void* payload,
              std::shared_ptr<const void> keep, bool to_worker);
  // The keys frames about `shard` of `epoch` are sealed and checked with
  // (null: none). `*on`: whether the shard authenticates frames at all.
  std::shared_ptr<const RankFrameKeys> AuthOf(int shard, int64_t epoch, bool* on = nullptr);
  // Records a send that could not start (no endpoint) as the step's failure.
  void FailSend(const FrameHeader& h, absl::Status s);
  bool FailedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || !send_error_.ok();
  }

  JobContext* const ctx_;
  std::unique_ptr<Transport> transport_;
  FrameSink* sink_ = nullptr;
  std::function<absl::Status()> check_;
  std::vector<PeerId> peers_;               // driving thread
  std::vector<std::string> addresses_;      // driving thread
  std::atomic<int64_t> first_push_us_{-1};  // for the timeline

  // Guards the channel's own state below, and nothing of its sinks'.
  absl::Mutex mu_;
  // Bumped (under mu_) by Notify and by every change of the channel's own
  // that a wait looks at (an error, the last worker send, READY, PULL):
  // WaitFor sleeps until it moves.
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_sends_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_worker_sends_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inflight_receives_ ABSL_GUARDED_BY(mu_) = 0;  // accepted, not yet landed
  absl::Status error_ ABSL_GUARDED_BY(mu_);             // ERROR frame or failed receive
  absl::Status send_error_ ABSL_GUARDED_BY(mu_);
  std::map<int, int64_t> ready_ ABSL_GUARDED_BY(mu_);  // READY: rank -> newest epoch
  // Worker PULLs: rank -> (epoch, step) of the newest.
  std::map<int, std::pair<int64_t, int64_t>> pulled_ ABSL_GUARDED_BY(mu_);
  struct NormAnswer {
    int64_t epoch = -1;
    int64_t step = -1;
    GradNormStats stats;
  };
  std::map<int, NormAnswer> norms_ ABSL_GUARDED_BY(mu_);  // shard -> its newest NORM
  // Set by the driving thread, read by forwards on the progress thread.
  std::vector<PeerId> worker_peers_ ABSL_GUARDED_BY(mu_);
  // By shard, newest epoch first; empty where frames go untagged.
  std::vector<std::deque<std::shared_ptr<const RankFrameKeys>>> auth_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> stale_dropped_{0};
  std::atomic<int64_t> endpoint_renewals_{0};
  std::atomic<int64_t> unauthenticated_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> bad_payload_{0};
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_DATA_CHANNEL_H_
