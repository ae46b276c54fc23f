// ShardJob: one job's state on one shard server, and the step protocol that
// guards it. Transport-free: the data plane feeds it decoded frame headers and
// carries out what it returns, so every rule here is unit-testable.
//
// State: the shard's range of the flat parameter vector (ZeRO-1/2, FSDP:
// fp32 master params and optimizer state, and the served parameters of the
// current version and the one before; DDP: the averaged gradient it
// serves), and pooled receive buffers for the pushes not summed yet.
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
//   PULL   for version v: answered with every bucket once version == v,
//          also while step v+1 is in flight: the shard keeps two served
//          versions (server/served_versions.h), so version v's bits of
//          every bucket stay whole until step v+2 (what a worker replacing
//          a dead rank mid-step pulls). Refused if v is older. While step v
//          is in flight, each bucket is served as soon as it is updated
//          (the step's other buckets may still be waiting for pushes or the
//          optimizer), so parameters flow back while the shard still
//          reduces and updates; the rest wait for their update.
//   A replaced rank (its frame keys handed to a new process): the receives
//          its earlier process left unfinished are abandoned
//          (AbandonReceives): owed again, and each receive's completion
//          names its reservation (a ticket), so a late one changes nothing.
// Anything that does not fit (unknown job, stale epoch, wrong shard, rank,
// bucket, size, step, duplicate) is refused with a status naming the problem,
// and changes nothing.
//
// Stall watch: a step is in progress from the first push reservation of
// step == version until the version advances. StallReport says, once it has
// lasted too long, which ranks have not pushed which buckets, so a dead or
// stuck worker is named in the server's log rather than leaving a silent hang.
//
// The job composes objects with their own contracts and tests; what is left
// here is the step protocol's order of events and the shard's values:
//   FrameChecks (frame_checks.h)       the refusals of INIT, PUSH and PULL;
//   PushTracker (push_tracker.h)       this step's pushes per bucket and
//                                      rank, and the stall clock;
//   BucketReducer (bucket_reducer.h)   where the pushes lie (pool, borrows),
//                                      prefix folds, the rank-order sum;
//   UpdateRule (update_rule.h)         by strategy, chosen at creation:
//                                      ZeRO's optimizer and state, or DDP's
//                                      mean; holds_params() answers every
//                                      "DDP refuses this";
//   StepSettings (step_settings.h)     the optimizer's settings and skipped
//                                      tensors of the next step;
//   PullWaitlist (pull_waitlist.h)     pulls of the step in flight;
//   StepHold (step_hold.h)             a held step (clipping by the job-wide
//                                      norm): buckets reduced and measured,
//                                      applied once RELEASE gives the factor
//                                      (shard_job_hold.cc);
//   StateTransfer (state_transfer.h)   the rules of ReadState and WriteState
//                                      (and their chunks until the commit);
//   CheckpointSchedule, JobCounters; job_admission.h's checks before a job
//   is created or restored.
// The job speaks plain C++; the gRPC adapter converts (shard_job_proto.h).
// Files: the step protocol in shard_job.cc, held steps in
// shard_job_hold.cc, the state between steps (snapshots, digest, stats,
// ReadState/WriteState) in shard_job_state.cc.
//
// Threads: Accept*/Complete* run on the transport thread, UpdateBucket and
// FoldPrefix on the server's compute threads, Stats and the state calls on
// gRPC threads, StallReport on the server's stall watcher; the job's
// bookkeeping is under mu_ (taken before the reducer's own lock, never
// after). The sums and the optimizer run outside mu_ on a bucket no one else
// may touch until the step ends (the protocol guarantees it).
//
// Example:
//   auto job = ShardJob::Create(spec, /*shard_index=*/0, /*epoch=*/1);
//   absl::StatusOr<void*> to = (*job)->AcceptData(push_header);  // receive into *to
//   ShardJob::Completion c = (*job)->CompleteReceive(push_header, absl::OkStatus());
//   if (c.update) ServeParams((*job)->UpdateBucket(*c.update));
#ifndef TESSEL_SERVER_SHARD_JOB_H_
#define TESSEL_SERVER_SHARD_JOB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/grad_norm.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/wire.h"
#include "proto/shard.pb.h"
#include "server/bucket_reducer.h"
#include "server/checkpoint_schedule.h"
#include "server/checkpointer.h"
#include "server/frame_checks.h"
#include "server/job_counters.h"
#include "server/pull_waitlist.h"
#include "server/push_tracker.h"
#include "server/served_versions.h"
#include "server/state_transfer.h"
#include "server/step_hold.h"
#include "server/step_settings.h"
#include "server/update_rule.h"
#include "transport/payload_vector.h"

namespace tessel {

// A job's state and counts at one moment (ShardJob::Stats).
struct JobStats {
  int64_t epoch = 0;
  int64_t step = 0;  // the version: updates applied
  bool initialized = false;
  bool step_in_progress = false;
  // Memory: fp32 masters (+ the served half copy under mixed precision),
  // optimizer state, and receive buffers (DDP: with the mean it serves).
  int64_t params_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t grad_buffer_bytes = 0;
  // Of which receive buffers retired by abandoned receives (AbandonReceives).
  int64_t retired_buffer_bytes = 0;
  // Completions of abandoned receives that came (and were ignored).
  int64_t abandoned_completions = 0;
  std::string state_digest;  // "" unless asked for
  JobCounters counters;
  CheckpointProgress checkpoint;
  int64_t last_snapshot_pause_us = 0;
  int64_t restored_from_step = -1;
  std::vector<int> worker_ids;
  // When each rank's pushes arrived, the last steps (server/flight_recorder.h).
  std::vector<StepArrivals> flight;
  // Per rank (host aggregation: per group), bytes that landed and were sent.
  std::vector<int64_t> rank_pushed_bytes, rank_pulled_bytes;
  // The step in progress (none: empty, -1): when its first push came, who
  // owes which buckets, the ranks whose pull of its result waits, and its
  // buckets updated so far (of num_buckets).
  int64_t step_started_us = -1;
  std::vector<PushTracker::SlotWaiting> waiting;
  std::vector<int> pulls_waiting;
  int step_hold = -1;  // the step in flight: 1 held, 0 not, -1 no push said yet
  int buckets_updated = 0;
  int num_buckets = 0;
};

// ReadState's answer, valid during the callback that receives it: the
// masters and each optimizer state slot over [offset, offset + count) of
// the shard's range, at `step`.
struct StateView {
  int64_t step = 0;
  Range range;
  int64_t offset = 0;
  absl::Span<const float> params;
  std::vector<absl::Span<const float>> state;
  absl::Span<const int64_t> tensor_skips;  // per tensor; empty if none ever skipped
};

// One WriteState call: StateWrite (server/state_transfer.h). Its answer:
struct StateWritten {
  int64_t staged = 0;  // elements staged (0 after a commit)
  int64_t step = 0;    // the shard's version
};

class ShardJob {
 public:
  // A PULL (pull_waitlist.h).
  using Puller = tessel::Puller;
  // The answer to a NORM_ASK (a held step's share of the norm), or its
  // refusal (status not OK: send an ERROR about the ask).
  struct NormReply {
    uint64_t reply_to = 0;
    int32_t rank = 0;
    int64_t step = 0;
    GradNormStats stats;
    absl::Status status;
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
    // NORM_ASKs answerable now: the held step's last bucket was measured
    // (or refused: its step ended without a norm).
    std::vector<NormReply> norms;
  };

  // `memory` (may be null): where the served parameters (or DDP's averaged
  // gradient) live, so workers on this host read them in place. Fails on an
  // invalid spec, shard or epoch, a job this machine cannot hold, or a spec
  // that cannot be written as JSON (its checkpoints would be unreadable).
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
  // so no receive buffer is needed (nullptr is returned). `ticket` (if not
  // null): the PUSH's reservation (PushTracker::Reserve; 0 for INIT), which
  // its completion names.
  absl::StatusOr<void*> AcceptData(const FrameHeader& h, bool borrow = false,
                                   uint64_t* ticket = nullptr);
  // The payload of an accepted PUSH/INIT landed (or failed: the slot is
  // released and may be pushed again). `update` is set if this completed a
  // bucket; `serve` lists pulls that became answerable (after INIT).
  // `ticket`: AcceptData's (0: whatever reservation the slot holds, for a
  // caller that completes before anything else can touch the slot). A
  // completion whose reservation was abandoned (AbandonReceives), success or
  // failure, changes nothing: Completion::abandoned.
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
    // The receive was abandoned (its sender's process was replaced): ignored,
    // nothing to answer.
    bool abandoned = false;
  };
  Completion CompleteReceive(const FrameHeader& h, const absl::Status& s, uint64_t ticket = 0);
  // A PUSH accepted with `borrow`: its gradient is at `data` (the worker's
  // memory, mapped here) until `lease` is dropped, which the bucket's update
  // does once it has read it (Serve::released), or the job's end.
  Completion CompleteBorrowed(const FrameHeader& h, const void* data, std::shared_ptr<void> lease,
                              uint64_t ticket = 0);
  // Rank `rank`'s process was replaced (its frame keys handed over,
  // server/frame_keys.h): its receives not finished are abandoned. Each slot
  // they reserved is empty again (the bucket is owed, as after a failed
  // receive: Stats().waiting lists it not pushed), their late completions
  // are ignored whenever they come, and the buffers the transport may still
  // write into are retired until the job goes (BucketReducer::Abandon). Logs
  // one line if any was abandoned. Returns how many.
  int AbandonReceives(int rank);
  // Reduces and updates a complete bucket. Returns who to serve: the pulls
  // of the step in progress waiting for this bucket, and if this finished
  // the step, the snapshot due. Several threads may update different buckets
  // of a step at once.
  Serve UpdateBucket(int bucket);
  // Sums the ranks of `bucket` that landed in rank order into the bucket's
  // accumulator (BucketReducer::Fold). Any thread, any time.
  void FoldPrefix(int bucket);
  // Off: buckets are reduced only once complete (the benchmark's baseline).
  // Call before the first push.
  void set_fold_prefix(bool on) { reducer_.set_fold_prefix(on); }
  // Held steps (server/step_hold.h; shard_job_hold.cc). A PUSH's
  // kFrameHoldUpdate is checked by AcceptData. NORM_ASK: the answer now, or
  // nullopt (it waits: a later UpdateBucket's Serve::norms answers it).
  absl::StatusOr<std::optional<NormReply>> AcceptNormAsk(const FrameHeader& h, uint64_t reply_to);
  // RELEASE: the buckets to update now (each one UpdateBucket, any thread).
  // A multiplier that is not a positive finite float is refused.
  absl::StatusOr<std::vector<int>> AcceptRelease(const FrameHeader& h);
  // PULL header arrived. Returns whom to serve now (possibly nobody: deferred).
  absl::StatusOr<Serve> AcceptPull(const FrameHeader& h, uint64_t reply_to);
  // The pulls (and NORM_ASKs, as pulls of their step that want no bucket)
  // still waiting for a step, handed over and forgotten: the job was
  // replaced (a recovery at a newer epoch) and they will never be answered
  // here; the data plane tells each puller so.
  std::vector<Puller> TakeWaitingPulls();
  // Payload of bucket `b` to send to a puller of `version` (params in the
  // job's wire precision; ServedVersions keeps the version before the
  // current one whole while the next step runs), and its size in bytes.
  // `version` is one the job answers a PULL of (FrameChecks::CheckPull).
  const void* served_bucket(int b, int64_t version) const;
  uint64_t served_bytes(int b) const;

  // Snapshot when the shard reaches `step`: at once if it is idle there
  // (returned), else when that step's last bucket is updated (UpdateBucket's
  // Serve.snapshot). FailedPrecondition if the shard is past `step` or in the
  // middle of it. `cancel` withdraws a request. A shard without elements
  // takes no part in the steps (core/layout.h): nothing, for any step;
  // shard 0's snapshots carry its part (ShardSnapshot::empty_shards).
  // SetOptimizer and SkipTensors take any step there (step_settings.h).
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
  // Who created the job (rpc/caller.h Caller::Identity; "" = not known), set
  // by the JobTable before the job is published; its checkpoints record it.
  void SetCreator(std::string creator);
  std::string creator();
  void CountRejected();
  // PARAMS bytes of `version` sent to `rank` (its pull's serve time).
  void CountPulled(int rank, int64_t version, uint64_t bytes);
  // `with_digest`: hash the state (under the job's lock, in proportion to its
  // size) for state_digest; metrics scrapes leave it out.
  JobStats Stats(bool with_digest = true);
  int64_t version();
  // Whether finishing the step in progress takes a checkpoint (every N steps
  // or asked for), as far as is known now.
  bool CheckpointDueNext();

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

  // Training state between steps (the ReadState/WriteState RPCs). Reading
  // needs the shard idle at `step` and at most kMaxStateElementsPerCall
  // (rpc/limits.h) elements; `out` sees them under the job's lock. Writing
  // stages chunks; the commit checks every element was staged and the shard
  // is idle, then replaces the masters and state (refreshing the served half
  // copy) and moves the version to `step`. Any error leaves the shard as it
  // was (a bad chunk drops the staging). `epoch` 0 is not checked.
  absl::Status ReadState(int64_t step, int64_t epoch, int64_t offset, int64_t count,
                         const std::function<void(const StateView&)>& out);
  absl::StatusOr<StateWritten> WriteState(const StateWrite& req);

 private:
  ShardJob(const v1::JobSpec& spec, std::string spec_json, Layout layout, int shard, int64_t epoch,
           OptimizerParams optimizer, std::shared_ptr<PayloadMemory> memory);
  FrameChecks::State FrameStateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A refused frame: counted (`stale`: of an older epoch), `refusal` returned.
  absl::Status RefusedLocked(absl::Status refusal, bool stale) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "job 'J' shard S: ", the start of every refusal.
  std::string Where() const;
  std::string DigestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ShardSnapshot SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StepInProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What StateTransfer needs to know of the shard.
  StateTransfer::Shard ShardLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AwaitUpdatesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the step whose last bucket was updated: the version moves, the
  // skips advance, a checkpoint due is taken, the pulls of the new version
  // are served.
  void FinishStepLocked(Serve* serve) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push of (h.bucket, h.rank) landed where `landed` says: counted, its
  // slot received, and `c` told whether to update or fold the bucket.
  void LandedLocked(const FrameHeader& h, const BucketReducer::Landing& landed, Completion* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t wire_bytes() const { return WireElementBytes(half_.has_value()); }
  // A held step's bucket (shard_job_hold.cc): reduced into held_ and
  // measured. Returns true if it is to be applied now (a RELEASE came
  // meanwhile: `step` then carries its multiplier); false: it waits, and
  // this update is over (Serve::norms may answer NORM_ASKs).
  bool ReduceHeld(int bucket, BucketStep* step, Serve* serve);
  // The step's gradient multiplier of a RELEASE into `step`'s settings.
  void HeldMultiplierLocked(BucketStep* step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The NORM_ASKs waiting, answered with the shard's stats or `refusal`.
  void AnswerNormsLocked(const absl::Status& refusal, Serve* serve)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Mixed precision: `version`'s half copy of [offset, offset + n).
  void RefreshHalf(int64_t version, size_t offset, size_t n) {
    served_.RefreshHalf(version, offset, n);
  }

  const v1::JobSpec spec_;
  const std::string spec_json_;  // checkpoints keep it
  const Layout layout_;
  const int shard_;
  const Range range_;
  const uint64_t job_id_;
  const int world_;
  // Hierarchical aggregation (JobSpec.rank_groups): each rank's group, whose
  // one push per bucket fills the group's slot; flat: group r = rank r.
  // Pushes are tracked and reduced per group (contributors_ of them) and the
  // mean divides by world_.
  const std::vector<int> group_;
  const int contributors_;
  const int num_buckets_;
  // Mixed precision: gradients arrive and parameters leave in half; the
  // masters and state stay fp32, and the served copy is half.
  const std::optional<HalfType> half_;
  // Top-k pushes (JobSpec.compression; 0 = off).
  const double topk_ratio_;
  // The strategy's update (ZeRO's optimizer and its state, or DDP's mean).
  const std::unique_ptr<UpdateRule> rule_;
  // Where this step's pushes lie until summed, and their sum.
  BucketReducer reducer_;
  // The protocol's refusals of frames.
  const FrameChecks checks_;
  // Owned range: params (ZeRO) or averaged grads (DDP) by version (the
  // served version and the one before: served_versions.h), written by INIT,
  // updates and restores while the protocol gives them no other reader.
  ServedVersions served_;

  absl::Mutex mu_;
  // The optimizer's settings and the skipped tensors, for the next step.
  StepSettings settings_ ABSL_GUARDED_BY(mu_);
  int64_t epoch_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  int init_buckets_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> init_seen_ ABSL_GUARDED_BY(mu_);
  // This step's pushes per bucket and rank, and its stall clock.
  PushTracker pushes_ ABSL_GUARDED_BY(mu_);
  int buckets_updated_ ABSL_GUARDED_BY(mu_) = 0;
  int updates_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Pulls waiting for buckets of the step in progress (or of the first
  // step, before INIT completes), and the buckets it updated.
  PullWaitlist pulls_ ABSL_GUARDED_BY(mu_);
  // The held step's protocol, its NORM_ASKs waiting, and its buckets' sums
  // (shard offsets; allocated with the first held step; written by a
  // bucket's reduction and read by its update, which the protocol orders).
  StepHold hold_ ABSL_GUARDED_BY(mu_);
  std::vector<NormReply> norm_waiters_ ABSL_GUARDED_BY(mu_);
  std::vector<float> held_;
  JobCounters counters_ ABSL_GUARDED_BY(mu_);
  // When to snapshot: every N steps, and the steps SaveCheckpoint asked for.
  CheckpointSchedule checkpoints_ ABSL_GUARDED_BY(mu_);
  int64_t last_pause_us_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restored_from_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<int> worker_ids_ ABSL_GUARDED_BY(mu_);
  std::string creator_ ABSL_GUARDED_BY(mu_);
  CheckpointProgress checkpoint_progress_ ABSL_GUARDED_BY(mu_);
  // ReadState's and WriteState's rules, and WriteState's chunks until the
  // commit.
  StateTransfer transfer_ ABSL_GUARDED_BY(mu_);
  // Completions of abandoned receives ignored so far.
  int64_t abandoned_completions_ ABSL_GUARDED_BY(mu_) = 0;
  // An abandoned receive's completion: counted, logged (rate-limited).
  Completion IgnoredLocked(const FrameHeader& h, bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_JOB_H_
