// ShardJob: one job's state on one shard server, and the step protocol that
// guards it. Transport-free: the data plane feeds it decoded frame headers and
// carries out what it returns, so every rule here is unit-testable.
//
// State: the shard's range of the flat parameter vector (ZeRO-1/2: fp32
// master params and optimizer state; DDP: the averaged gradient it serves),
// and pooled receive buffers for the pushes not summed yet.
//
// Step protocol ("version" = number of updates applied):
//   INIT   rank 0 only, before anything else: bucket b of the initial params.
//          (DDP holds no params and needs no INIT.)
//   PUSH   gradient bucket for step == version from a rank that has not
//          pushed it yet. When all ranks have pushed bucket b, the bucket is
//          reduced in rank order (bitwise reproducible whatever the arrival
//          order) and the optimizer runs on it. When every bucket is done the
//          version advances. Prefix order (W >= 3): while a bucket waits
//          for its last ranks, the ranks 0..k-1 that have landed are summed
//          left to right into an accumulator (FoldPrefix), so the update
//          after the last arrival reads the accumulator and ranks k..W-1
//          only: the same left-to-right sum, the same bits.
//   PULL   for version v: answered with every bucket once version == v
//          (refused if v is gone). While step v is in flight, each bucket
//          is served as soon as it is updated (the step's other buckets
//          may still be waiting for pushes or the optimizer), so parameters
//          flow back while the shard still reduces and updates; the rest
//          wait for their update.
// Anything that does not fit (unknown job, stale epoch, wrong shard, rank,
// bucket, size, step, duplicate) is refused with a status naming the problem,
// and changes nothing.
//
// Stall watch: a step is in progress from the first push reservation of
// step == version until the version advances. StallReport says, once it has
// lasted too long, which ranks have not pushed which buckets, so a dead or
// stuck worker is named in the server's log rather than leaving a silent hang.
// The per-bucket push bookkeeping and the stall clock are a PushTracker's
// (push_tracker.h); WriteState's chunks wait in a StateStaging
// (state_staging.h).
//
// Threads: Accept*/Complete* run on the transport thread, UpdateBucket on the
// server's compute thread, Stats on gRPC threads, StallReport on the server's
// stall watcher; all bookkeeping is under mu_. The optimizer kernel runs outside mu_ on a bucket no
// one else may touch until the step ends (the protocol guarantees it).
#ifndef TESSEL_SERVER_SHARD_JOB_H_
#define TESSEL_SERVER_SHARD_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/tensor_steps.h"
#include "core/wire.h"
#include "proto/shard.pb.h"
#include "server/checkpointer.h"
#include "server/push_tracker.h"
#include "server/state_staging.h"
#include "transport/payload_vector.h"

namespace tessel {

class ShardJob {
 public:
  // A PULL: who asked (an opaque reply token), for which version and which
  // buckets; in a Serve, also the buckets to send it now.
  struct Puller {
    uint64_t reply_to;
    int32_t rank;
    int64_t version;
    int first_bucket = 0;
    int bucket_count = 0;  // 0: notify only (an empty PARAMS frame)
    // In a Serve: the buckets of [first_bucket, first_bucket + bucket_count)
    // to send now, at `version` (a deferred pull gets each bucket once, as
    // its update ends). Empty for a notify.
    std::vector<int> buckets;
  };
  // What the data plane must do after an event.
  struct Serve {
    std::vector<Puller> pullers;  // each gets its `buckets` of its `version`
    int64_t version = 0;
    // Borrowed pushes the update has finished reading: drop them (which
    // releases them to their workers) before serving the pullers.
    std::vector<std::shared_ptr<void>> released;
    // A checkpoint was due at this step boundary: write it.
    std::optional<ShardSnapshot> snapshot;
  };

  // `memory` (may be null): where the served parameters (or DDP's averaged
  // gradient) live, so workers on this host read them in place.
  static absl::StatusOr<std::unique_ptr<ShardJob>> Create(
      const v1::JobSpec& spec, int shard_index, int64_t epoch,
      std::shared_ptr<PayloadMemory> memory = nullptr);
  // A job that starts at `manifest.step` from a checkpoint, re-sliced to this
  // spec's shard count. The checkpoint's layout, strategy and optimizer must
  // equal the spec's.
  static absl::StatusOr<std::unique_ptr<ShardJob>> Restore(
      const v1::JobSpec& spec, int shard_index, int64_t epoch, const Manifest& manifest,
      Checkpointer* checkpointer, std::shared_ptr<PayloadMemory> memory = nullptr);

  const v1::JobSpec& spec() const { return spec_; }
  const Layout& layout() const { return layout_; }
  int shard() const { return shard_; }
  Range range() const { return range_; }
  // Elements of this shard's part of bucket `b`.
  int64_t bucket_elements(int b) const { return layout_.bucket_range(shard_, b).size(); }
  uint64_t job_id() const { return job_id_; }
  // Pushes carry top-k pairs (JobSpec.compression): never read in place.
  bool compressed() const { return topk_ratio_ > 0; }

  // PUSH or INIT header arrived: validates it and returns where its payload
  // goes. The slot is reserved until CompleteReceive. `borrow` (PUSH only):
  // the payload will be read where the worker keeps it (CompleteBorrowed),
  // so no receive buffer is needed (nullptr is returned).
  absl::StatusOr<void*> AcceptData(const FrameHeader& h, bool borrow = false);
  // The payload of an accepted PUSH/INIT landed (or failed: the slot is
  // released and may be pushed again). `update` is set if this completed a
  // bucket; `serve` lists pulls that became answerable (after INIT).
  struct Completion {
    std::optional<int> update;
    Serve serve;
    // The payload landed but is malformed (top-k pairs): refused, nothing
    // changed, the rank may push again. The data plane answers with ERROR.
    absl::Status error;
    // Ranks of this bucket landed in rank order past what is summed: run
    // FoldPrefix(*fold) on a compute thread when one is free (optional:
    // skipping it only leaves more of the sum to UpdateBucket).
    std::optional<int> fold;
  };
  Completion CompleteReceive(const FrameHeader& h, const absl::Status& s);
  // A PUSH accepted with `borrow`: its gradient is at `data` (the worker's
  // memory, mapped here) until `lease` is dropped, which the bucket's update
  // does once it has read it (Serve::released), or the job's end.
  Completion CompleteBorrowed(const FrameHeader& h, const void* data, std::shared_ptr<void> lease);
  // Reduces and updates a complete bucket. Returns who to serve: the pulls
  // of the step in progress waiting for this bucket, and if this finished
  // the step, the snapshot due. Several threads may update different buckets
  // of a step at once.
  Serve UpdateBucket(int bucket);
  // Sums the ranks of `bucket` that landed in rank order (0, 1, ... k-1)
  // into the bucket's accumulator, and again while more arrive in order;
  // stops once the bucket is complete or its update began (UpdateBucket
  // waits for a fold already running, then sums only what is left). Any
  // thread, any time: a fold that finds nothing to do returns, and two
  // folds of a bucket never run at once.
  void FoldPrefix(int bucket);
  // Off: buckets are reduced only once complete (the benchmark's baseline).
  // Call before the first push.
  void set_fold_prefix(bool on) { fold_prefix_ = on; }
  // PULL header arrived. Returns whom to serve now (possibly nobody: deferred).
  absl::StatusOr<Serve> AcceptPull(const FrameHeader& h, uint64_t reply_to);
  // The pulls still waiting for a step, handed over and forgotten: the job
  // was replaced (a recovery at a newer epoch) and they will never be
  // answered here; the data plane tells each puller so.
  std::vector<Puller> TakeWaitingPulls();
  // Payload of bucket `b` to send for the current version (params in the
  // job's wire precision), and its size in bytes.
  const void* served_bucket(int b) const;
  uint64_t served_bytes(int b) const;

  // Snapshot when the shard reaches `step`: at once if it is idle there
  // (returned), else when that step's last bucket is updated (UpdateBucket's
  // Serve.snapshot). FailedPrecondition if the shard is past `step` or in the
  // middle of it. `cancel` withdraws a request.
  absl::StatusOr<std::optional<ShardSnapshot>> RequestCheckpoint(int64_t step, bool cancel);
  void SetCheckpointProgress(const CheckpointProgress& p);

  absl::Status SetEpoch(int64_t epoch);
  int64_t epoch();
  // New hyper-parameters from `step` on (a learning-rate schedule): the
  // shard must be at step - 1; the kind may not change. Validated like a
  // new job's; on error nothing changes.
  absl::Status SetOptimizer(const OptimizerParams& optimizer, int64_t step);
  // Tensors (indices into the layout) that `step` leaves alone: torch's rule
  // for parameters no rank has a gradient for (core/tensor_steps.h). The
  // shard must be at step - 1, and no bucket of this shard holding one of
  // them may be complete yet; every rank sends the same set, so a different
  // set for the same step is refused. On error nothing changes.
  absl::Status SkipTensors(const std::vector<int32_t>& tensors, int64_t step);
  // Per tensor, the steps that skipped it (empty: none ever did).
  std::vector<int64_t> tensor_skips();
  // Recovery: this job replaces `previous` (same name): it carries on its
  // counters (refused frames, bytes, applied steps) and counts one recovery.
  void InheritCounters(ShardJob& previous);
  // DDP recovery: an empty job that starts at the workers' step.
  void StartAt(int64_t step);
  // The checkpoint step this job was restored from (or StartAt), -1 if none.
  int64_t restored_from();
  // Registry ranks of the workers in data-parallel rank order, as the
  // recovery that created this job set them (empty = 0..world_size-1).
  void SetWorkerIds(std::vector<int> ids);
  std::vector<int> worker_ids();
  void CountRejected();
  void CountPulled(uint64_t bytes);
  // `with_digest`: hash the state (under the job's lock, in proportion to its
  // size) for state_digest; metrics scrapes leave it out.
  v1::ShardStats Stats(bool with_digest = true);
  int64_t version();

  // If the current step has been in progress for longer than `after` at
  // `now`: one log line naming the job, shard, step, epoch, how long, and
  // what the step waits for (per rank the buckets it has not pushed, with its
  // registry rank when worker_ids are set; receives not finished; pulls
  // waiting for the step). At most one report per `after` of a step, so a
  // caller polling more often logs a stall once every `after`. nullopt
  // otherwise. Pure apart from mu_: the caller supplies the time.
  //
  // Example:
  //   job 'b' shard 0: step 41 (epoch 2) stalled for 2.1s, waiting for pushes
  //   from rank 1 (buckets 0-3 of 4); pulls waiting for step 42: ranks 0, 2
  std::optional<std::string> StallReport(absl::Time now, absl::Duration after);
  // Copies of the owned range, for tests and checkpoints.
  std::vector<float> ParamsSnapshot();

  // Training state between steps (ReadState/WriteState RPCs). Reading needs
  // the shard idle at `step`. Writing stages chunks; the commit checks every
  // element was staged and the shard is idle, then replaces the masters and
  // state (refreshing the served half copy) and moves the version to `step`.
  // Any error leaves the shard as it was (a bad chunk drops the staging).
  absl::StatusOr<v1::ShardState> ReadState(const v1::ReadStateRequest& req);
  absl::StatusOr<v1::WriteStateResponse> WriteState(const v1::WriteStateRequest& req);

 private:
  ShardJob(const v1::JobSpec& spec, Layout layout, int shard, int64_t epoch,
           OptimizerParams optimizer, std::shared_ptr<PayloadMemory> memory);
  absl::Status CheckHeader(const FrameHeader& h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DigestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardSnapshot SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StepInProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool is_ddp() const { return spec_.strategy() == v1::STRATEGY_DDP; }

  const v1::JobSpec spec_;
  const Layout layout_;
  const int shard_;
  const Range range_;
  const uint64_t job_id_;
  OptimizerParams optimizer_ ABSL_GUARDED_BY(mu_);
  const int world_;
  const int num_buckets_;

  // Owned range: params (ZeRO) or averaged grads (DDP), optimizer state, and
  // one gradient receive buffer per rank.
  PayloadVector<float> values_;
  std::vector<std::vector<float>> state_;
  // Copied pushes land in bucket-sized buffers (floats; a half push fills
  // the first half) from a per-bucket pool: taken when a rank's push is
  // accepted, given back once it is summed (by a fold or the update). So a
  // server holds buffers only for the pushes not summed yet: with prefix
  // order and ranks arriving about in rank order, a few per bucket rather
  // than W. Pushes read in place need none. [bucket][rank] and [bucket].
  std::vector<std::vector<std::unique_ptr<float[]>>> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::unique_ptr<float[]>>> spare_ ABSL_GUARDED_BY(mu_);
  int64_t buffer_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // held and spare
  // Per rank, where its push of `bucket` lies (borrowed or held), for the
  // fold or update about to read it outside the lock.
  void LandedLocked(int bucket, std::vector<const void*>* landed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ranks [from, to) of `bucket` are summed: their buffers go to the pool.
  void ReturnBuffersLocked(int bucket, int from, int to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Mixed precision: gradients arrive and parameters leave in half; the
  // masters and state stay fp32. values_half_ is the served copy of values_.
  const std::optional<HalfType> half_;
  // Top-k pushes (JobSpec.compression; 0 = off): per bucket, where its
  // pairs start in a rank's sparse buffer (allocated on its first push).
  const double topk_ratio_;
  std::vector<uint64_t> sparse_offset_;
  std::vector<std::vector<uint8_t>> rank_sparse_;
  PayloadVector<uint16_t> values_half_;
  // Prefix order (fold_prefix_ and W >= 3, not top-k): the running sum of
  // each bucket's first ranks (one shard-sized buffer, allocated at the
  // first fold), and per bucket: how many ranks landed in rank order, how
  // many are summed into acc_ (0, or >= 2), whether a fold was asked for
  // (Completion::fold) or is running, and whether its update began.
  bool fold_prefix_ = true;
  std::vector<float> acc_;
  std::vector<int> landed_prefix_ ABSL_GUARDED_BY(mu_);
  std::vector<int> folded_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> fold_queued_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> fold_running_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> updating_ ABSL_GUARDED_BY(mu_);
  // Rank r's part of a bucket, the chunk [off, off + n) of the shard, from
  // where its push lies (`landed`, the bucket's first element, which is at
  // shard offset bucket_at), widened from half into `scratch` (n floats).
  const float* RankChunk(int r, const std::vector<const void*>& landed, size_t bucket_at,
                         size_t off, size_t n, float* scratch) const;
  // The sources of a left-to-right sum over that chunk: the accumulator
  // (`with_acc`), then ranks [from, to) by RankChunk, widening into
  // `widened` (grown as needed). Fills `srcs`; returns how many.
  int ChunkSources(const std::vector<const void*>& landed, size_t bucket_at, size_t off, size_t n,
                   bool with_acc, int from, int to, std::vector<float>* widened,
                   std::vector<const float*>* srcs) const;
  // Per bucket and rank: the borrowed push (its bucket's first element in
  // the worker's memory, and its lease), or null.
  std::vector<std::vector<const void*>> borrowed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::shared_ptr<void>>> leases_ ABSL_GUARDED_BY(mu_);
  size_t wire_bytes() const { return half_ ? 2 : 4; }
  void RefreshHalf(size_t offset, size_t n);

  absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  int init_buckets_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> init_seen_ ABSL_GUARDED_BY(mu_);
  // This step's pushes per bucket and rank, and its stall clock.
  PushTracker pushes_ ABSL_GUARDED_BY(mu_);
  int buckets_updated_ ABSL_GUARDED_BY(mu_) = 0;
  int updates_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Pulls waiting for buckets of a step not reached yet; `sent` marks, per
  // bucket of the pull, those already served (updated in the step in
  // progress).
  struct Waiting {
    Puller puller;
    std::vector<uint8_t> sent;
  };
  std::vector<Waiting> deferred_ ABSL_GUARDED_BY(mu_);
  // Per bucket: updated in the step in progress (servable at version_ + 1).
  std::vector<uint8_t> bucket_updated_ ABSL_GUARDED_BY(mu_);
  // Moves every deferred pull of `version_` into `serve`, with the buckets
  // it still lacks.
  void ServeWaitingLocked(Serve* serve) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pushed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pulled_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> checkpoint_requests_ ABSL_GUARDED_BY(mu_);
  int64_t last_pause_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restored_from_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t stale_epoch_frames_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t applied_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t update_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t folded_pushes_ ABSL_GUARDED_BY(mu_) = 0;
  int recoveries_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> worker_ids_ ABSL_GUARDED_BY(mu_);
  CheckpointProgress checkpoint_progress_ ABSL_GUARDED_BY(mu_);
  // Per tensor, the job's steps that skipped it (empty: none), and the
  // tensors the step in progress skips (empty: none).
  // Only the tensors in this shard's range (owned_) are counted: workers tell
  // only the shards that hold a skipped tensor.
  std::vector<int64_t> tensor_skips_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> skip_now_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> owned_;
  // WriteState's chunks until the commit.
  StateStaging staging_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_JOB_H_
