// DataPlane: the shard server's side of the data path. Decodes every frame
// the transport delivers, routes it to its job (looked up in the JobTable),
// answers refusals with ERROR frames, runs bucket updates on compute
// threads (never on the transport thread), hands due snapshots to the
// Checkpointer, and sends parameters to the workers that pulled them, each
// bucket as soon as its update ends. It creates and deletes no jobs: that
// is the JobTable's, driven over gRPC.
//
// Threads: OnFrame and receive completions on the transport thread; bucket
// updates on `update_threads` compute threads, which take complete buckets
// in arrival order (different buckets of a step update at once; each
// bucket's result does not depend on which thread or when), and fold the
// ranks of incomplete buckets that landed in rank order (ShardJob::
// FoldPrefix: with three or more ranks, most of a bucket's sum is done
// before its last rank arrives), and which the
// plane owns and joins on destruction. A large bucket's update is split
// over the plane's UpdatePool (server/update_pool.h: update_threads - 1
// helper threads, which join only while fewer than update_threads threads
// update), so one bucket alone gets every update thread's core; the same
// bits as on one thread. The update queue and counters are
// under mu_; each ShardJob guards itself. Shut the transport down before
// destroying the plane.
//
// Example:
//   JobTable jobs(&checkpointer);
//   DataPlane plane(transport.get(), &jobs, &checkpointer);
//   auto created = jobs.CreateJob(request);  // frames for it are routed now
#ifndef TESSEL_SERVER_DATA_PLANE_H_
#define TESSEL_SERVER_DATA_PLANE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/shard.pb.h"
#include "runtime/spin_budget.h"
#include "runtime/timeline.h"
#include "server/checkpointer.h"
#include "server/frame_keys.h"
#include "server/job_table.h"
#include "server/server_metrics.h"
#include "server/shard_job.h"
#include "server/update_pool.h"
#include "transport/transport.h"

namespace tessel {

// How long an update thread out of work polls (yielding) for the next
// bucket before it sleeps, so the next bucket starts without a wake-up
// (measured on 2 cores, W=2, 16 MiB: 8.4-10.0 ms steps without, 6.8-7.5
// with 5 ms). The one default of DataPlane, ShardServerOptions::update_spin
// and tessel-server's --update_spin_us; in-process test clusters set 0.
inline constexpr absl::Duration kDefaultUpdateSpin = absl::Milliseconds(5);

class DataPlane {
 public:
  // Installs the transport's handler. `jobs` and `checkpointer` (not owned;
  // the checkpointer may be a disabled one) must outlive the plane, as must
  // `metrics` (not owned; null: none). `update_threads` >= 1. A compute
  // thread that ran out of work polls the queue (yielding the CPU) for
  // `spin` before it sleeps, so the next bucket of a step starts without a
  // wake-up (as the transport's progress thread does).
  // Buckets of at most `inline_update_max_bytes` (fp32 elements x 4; 0:
  // none) skip the update threads: the transport's thread reduces, updates
  // and serves them as the last push lands, saving two thread hand-offs
  // (to an update thread and back to the transport) per bucket; not when
  // the step takes a checkpoint (its Submit may wait for room).
  // `frame_keys` (not owned; null: off): frames of a job that has keys must
  // carry a valid tag under the up key of their rank and epoch
  // (runtime/rank_keys.h); others are dropped without an answer, counted as
  // refused "unauthenticated" and logged (at most a line every 10 s), and
  // every frame of the job this plane sends is sealed under the down key of
  // its addressee. The first authenticated frame of a (rank, epoch) binds
  // that rank to the endpoint it came from: the rank's frames of that epoch
  // from any other endpoint (replays of captured bytes) are dropped without
  // an answer, counted as refused "replayed" (replayed()), and a PULL is
  // answered only on the rank's endpoint. A rank handed to a replacement
  // process (FrameKeys::Claim) is bound anew by the first frame under its
  // new keys (the keys' generation), from the replacement's endpoint; the
  // earlier process's frames no longer verify.
  // With payload tags too (FrameKeys::payload), a PUSH or INIT whose payload
  // does not match the tag its (authenticated) header carries is dropped
  // after it landed and before the job counts it: its slot is freed, nothing
  // is summed or applied, no answer goes out; counted as refused
  // "bad_payload" (bad_payload()) and logged at most every 10 s. A borrowed
  // push is checked where it lies, before it is borrowed. Every frame sent
  // carries its payload's tag under the addressee's down payload key.
  // With keys on (FrameKeys::enabled), a frame that cannot be authenticated
  // at all (malformed, or naming a job this server does not serve) is
  // dropped without an answer too (unanswered()), so job ids cannot be
  // probed; with keys off it gets an ERROR saying what is wrong.
  DataPlane(Transport* transport, JobTable* jobs, Checkpointer* checkpointer,
            ServerMetrics* metrics = nullptr, Timeline* timeline = nullptr, int update_threads = 1,
            absl::Duration spin = kDefaultUpdateSpin, SpinMode poll_mode = SpinMode::kSpin,
            int64_t inline_update_max_bytes = 0, FrameKeys* frame_keys = nullptr);

  ~DataPlane();
  // Joins the update threads and stops releasing borrowed pushes through
  // the transport: call before shutting the transport down. Idempotent.
  void Stop();

  // Frames refused before reaching a job (malformed, unknown job).
  int64_t rejected_unrouted();
  // Of those, the ones dropped without an answer (keys on: see above).
  int64_t unanswered() const { return unanswered_.load(); }
  // Frames dropped for a missing or wrong tag.
  int64_t unauthenticated() const { return unauthenticated_.load(); }
  // Frames dropped for coming from another endpoint than their rank's.
  int64_t replayed() const { return replayed_.load(); }
  // Frames dropped for a payload that does not match its tag.
  int64_t bad_payload() const { return bad_payload_.load(); }
  // Complete buckets waiting for the compute thread.
  int64_t update_queue_depth();

 private:
  Accept OnFrame(const Incoming& in);
  // `reason`: the metrics label ("" = the status code's name).
  void SendError(PeerId to, const FrameHeader& about, const absl::Status& s,
                 absl::string_view reason = "");
  // Counts, and logs at most every 10 s, a frame dropped without an answer.
  void CountUnanswered(absl::string_view reason);
  // JobTable's ReplacedListener: an ERROR to each pull the old job owed.
  void RefuseReplacedPulls(ShardJob& old, const std::vector<ShardJob::Puller>& waiting);
  void ServeParams(const std::shared_ptr<ShardJob>& job, const ShardJob::Serve& serve);
  // A held step's NORM answers (or their refusals).
  void SendNorms(const std::shared_ptr<ShardJob>& job,
                 const std::vector<ShardJob::NormReply>& norms);
  // Complete buckets for the update threads (or this thread: inline).
  void QueueUpdates(const std::shared_ptr<ShardJob>& job, const std::vector<int>& buckets);
  // The job's frame keys if it has them (kept by FrameKeys for the
  // server's life), else null.
  JobFrameKeys* AuthOf(uint64_t job_id);
  // The job's keys if its frames carry payload tags, else null.
  JobFrameKeys* PayloadKeysOf(uint64_t job_id);
  // Counts and logs (every 10 s at most) a frame whose payload failed its tag.
  void DropBadPayload(ShardJob& job, const FrameHeader& h);
  // `h` sealed for its addressee under `keys` (null: bare), with the tag of
  // the h.payload_bytes bytes at `payload` where the job tags payloads.
  static WireHeader ToWorker(JobFrameKeys* keys, const FrameHeader& h, const void* payload);
  // Each job's ranks' endpoints in its current epoch (with keys on).
  class RankEndpoints {
   public:
    // Whether `h` (authenticated under its rank's keys of `generation`, of a
    // rank of `job`) may come from `from`: the first frame of its rank in the
    // job's epoch binds the rank there, and so does the first frame of a
    // newer generation (a handover); a frame of an older generation (sealed
    // before the handover) is refused.
    bool Admit(const std::shared_ptr<ShardJob>& job, const FrameHeader& h, PeerId from,
               int32_t generation);

   private:
    struct Endpoint {
      PeerId peer = 0;
      int32_t generation = 0;  // of the keys that bound it
    };
    struct Bound {
      std::weak_ptr<ShardJob> job;  // a recreated job starts over
      int64_t epoch = 0;
      absl::flat_hash_map<int32_t, Endpoint> from;  // rank -> endpoint
    };
    absl::Mutex mu_;
    absl::flat_hash_map<uint64_t, Bound> bound_ ABSL_GUARDED_BY(mu_);
  };
  void ComputeLoop();
  // Reduces and updates one complete bucket and serves it. On the
  // transport's thread (`inline_update`) it never waits for the
  // checkpointer.
  void UpdateAndServe(const std::shared_ptr<ShardJob>& job, int bucket, bool inline_update);
  // After a PUSH landed (or was borrowed), or its receive failed.
  void PushCompleted(const std::shared_ptr<ShardJob>& job, const FrameHeader& header, PeerId from,
                     const absl::Status& s, ShardJob::Completion c);
  // A lease that releases a borrowed push when dropped (if the plane still
  // runs).
  std::shared_ptr<void> MakeLease(PeerId from, uint64_t lease);
  struct Releaser {
    absl::Mutex mu;
    Transport* transport ABSL_GUARDED_BY(mu) = nullptr;
  };

  Transport* const transport_;
  JobTable* const jobs_;
  FrameKeys* const frame_keys_;  // null: frames are not authenticated
  std::atomic<int64_t> unauthenticated_{0};
  std::atomic<int64_t> unanswered_{0};
  std::atomic<int64_t> replayed_{0};
  std::atomic<int64_t> bad_payload_{0};
  RankEndpoints endpoints_;
  Checkpointer* const checkpointer_;
  ServerMetrics* const metrics_;
  Timeline* const timeline_;  // --timeline; not owned
  absl::Mutex mu_;
  // A bucket to update, or (fold) to fold in prefix order.
  struct Work {
    std::shared_ptr<ShardJob> job;
    int bucket = 0;
    bool fold = false;
  };
  std::deque<Work> updates_ ABSL_GUARDED_BY(mu_);
  // updates_.size(), for the compute threads' spin (read without the lock).
  std::atomic<int> queued_{0};
  SpinPolicy spin_;  // the update threads' polling window
  // Buckets of at most this many bytes (fp32 elements x 4) are updated on
  // the transport's thread as their last push lands (0: never).
  const int64_t inline_update_max_bytes_;
  // Set under mu_ (so Await sees it); read without it by the spin.
  std::atomic<bool> stop_{false};
  int64_t rejected_unrouted_ ABSL_GUARDED_BY(mu_) = 0;
  // Splits a large bucket's update (the compute threads' UpdatePool::Current).
  UpdatePool pool_;
  std::vector<std::thread> compute_;
  const std::shared_ptr<Releaser> releaser_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_DATA_PLANE_H_
