// BucketExchange: one step of the full-buffer strategies (ddp, zero1, zero2)
// on the wire. It holds the model-sized buffers the training code writes
// (gradients) and reads (parameters; for DDP the averaged gradient lands in
// the gradient buffer), pushes each (shard, bucket) of gradients exactly once
// per step, as soon as the caller hands its elements over or at the step's
// end, and counts the PARAMS frames of the step's pull.
//
// Contract:
//   - A step is: GradientsReady* (optional), then Exchange(step + 1), which
//     pushes every bucket not pushed yet, pulls, and waits until every
//     bucket of every shard has arrived; then NextStep().
//   - PARAMS frames of another step or epoch, or of the wrong size, are
//     dropped and counted as stale; none ever lands in a buffer.
//   - Results do not depend on push order (the servers reduce in rank
//     order): with a shuffle seed, buckets go in a random order with pauses.
//   - Hierarchical aggregation (ctx->rank_groups, host_aggregator.h): a
//     bucket another worker of this host aggregates is pushed to it, and its
//     parameters come from it; a bucket this worker aggregates is summed with
//     the host's pushes, pushed, pulled and passed on. Exchange returns once
//     those PARAMS have left (so the buffer they came from may change).
//     Pull (after a restore) always pulls every bucket itself.
//
// Threads: the driving thread calls everything; OnParams, OnPush and the
// receives they start complete on the transport's progress thread. The
// exchange keeps its receive state under its own mutex (mu_, below); the
// channel only delivers frames (FrameSink) and is woken (Notify) when the
// pull may be complete.
//
// Example:
//   BucketExchange exchange(&ctx, &channel);
//   channel.SetSink(&exchange);
//   exchange.Allocate();                          // after the layout is registered
//   ... backward writes exchange.buffers().grads ...
//   TESSEL_RETURN_IF_ERROR(exchange.GradientsReady(0, n));  // pushes the buckets
//   TESSEL_RETURN_IF_ERROR(exchange.Exchange(step + 1));    // pulls step + 1
//   exchange.NextStep();
#ifndef TESSEL_WORKER_INTERNAL_BUCKET_EXCHANGE_H_
#define TESSEL_WORKER_INTERNAL_BUCKET_EXCHANGE_H_

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "transport/payload_vector.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/host_aggregator.h"
#include "worker/internal/job_context.h"
#include "worker/reports.h"

namespace tessel::internal {

// The worker's model-sized buffers; each is empty when the strategy and
// precision do not use it.
// In the transport's payload memory: pushes are read where they lie and
// parameters land with one copy (UCX on one host; transport/transport.h).
struct ModelBuffers {
  PayloadVector<float> params;  // zero1/zero2 fp32; DDP: fp32 masters
  PayloadVector<float> grads;   // fp32 full-buffer modes
  PayloadVector<uint16_t> params_half;
  PayloadVector<uint16_t> grads_half;
};

class BucketExchange : public FrameSink {
 public:
  BucketExchange(JobContext* ctx, DataChannel* channel);

  // Sizes the buffers for the registered layout (ctx->layout, ctx->half)
  // and the strategy, and the per-bucket bookkeeping for every shard.
  void Allocate();
  // Takes ctx->rank_groups (and rank) anew: after a recovery, nothing in flight.
  void Regroup() { aggregator_.Configure(ctx_->rank_groups); }
  // After Allocate or Regroup: waits for the other workers of this host
  // (HostAggregator::Meet); at once when flat.
  absl::Status Meet() { return aggregator_.Meet(); }
  const HostAggregator& aggregator() const { return aggregator_; }
  ModelBuffers& buffers() { return buffers_; }
  const ModelBuffers& buffers() const { return buffers_; }

  // Adds one micro-batch's gradient (the first call of a step overwrites).
  absl::Status AccumulateGradients(absl::Span<const float> micro);
  int micro_batches() const { return micro_batches_; }
  // Elements [begin, end) are final: buckets they complete are pushed now.
  absl::Status GradientsReady(int64_t begin, int64_t end);
  // Top-k compressed by the caller (Worker::SparseBucket): every bucket's
  // pairs, one bucket's, and the hand-over of one (pushed now, or by
  // Exchange with a shuffle seed; the worker's residual is not touched).
  absl::Span<uint8_t> sparse() { return absl::MakeSpan(sparse_); }
  absl::StatusOr<absl::Span<uint8_t>> SparseBucket(int shard, int bucket);
  absl::Status SparseReady(int shard, int bucket);
  // Per-unit zero2: the unit's buckets were pushed from its own buffer.
  void MarkPushed(int shard, int bucket) { pushed_[shard][bucket] = 1; }
  // Buckets not pushed yet this step.
  int64_t unpushed() const;

  // A held step (clipping, Worker::HeldGradientNorm): averages accumulated
  // micro-batches and pushes every bucket not pushed yet, now; Exchange
  // then only pulls. FailedPrecondition with host aggregation.
  absl::Status PushRemaining();
  // Sends rank 0's initial fp32 parameters (INIT) from `source`.
  void SendInit(const float* source);
  // Averages accumulated micro-batches, pushes what is left (the pull of
  // `version` first, so pulls queue behind no push), waits for the pull.
  absl::Status Exchange(int64_t version);
  // The last successful Exchange's phases (worker/reports.h).
  StepPhases last_phases() const { return last_phases_; }
  // Pulls the parameters of `version` (after a restore) and waits for them.
  absl::Status Pull(int64_t version);
  // Forgets the step's hand-overs and pushes.
  void NextStep();
  // A recovery starts: accept no PARAMS until the rollback's pull.
  void Reset();
  // After a recovery's SettleReceives: if a transfer may still write into
  // the receive buffer (stuck), it is retired (kept, never read) and replaced.
  void Retire(bool stuck, std::vector<PayloadVector<float>>* retired,
              std::vector<PayloadVector<uint16_t>>* retired_half);

  Accept OnParams(const FrameHeader& h) override;
  Accept OnPush(const FrameHeader& h, const Incoming& in) override {
    return aggregator_.OnPush(h, in);
  }

 private:
  void PushBucket(int shard, int bucket);
  // Pulls `version`: every bucket, or (host aggregation) those this worker
  // aggregates.
  void SendPulls(int64_t version, bool all);
  // Expects the PARAMS of `version` in the current epoch (once per version:
  // host aggregation arms it at the step's first push, before a forward can
  // come).
  void ArmLocked(int64_t version) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitForParams(int64_t version);
  // A PARAMS frame of (epoch, step) for `shard` landed; passes it on to the
  // host's other workers from `dst` if `forwards`.
  void Landed(const FrameHeader& h, void* dst, bool forwards);
  bool PulledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return received_ == expected_ && forwarding_ == 0;
  }

  JobContext* const ctx_;
  DataChannel* const channel_;
  ModelBuffers buffers_;
  // Top-k (options.topk_ratio > 0): what was not pushed yet (error
  // feedback), and the pairs pushed, per (shard, bucket) at sparse_at_.
  std::vector<float> residual_;
  std::vector<uint8_t> sparse_;
  std::vector<std::vector<uint64_t>> sparse_at_;
  // Per (shard, bucket): its pairs were written by the caller this step.
  std::vector<std::vector<uint8_t>> caller_sparse_;
  int micro_batches_ = 0;  // AccumulateGradients calls this step
  // Per (shard, bucket): elements handed over this step, and pushed flag.
  std::vector<std::vector<int64_t>> ready_elems_;
  std::vector<std::vector<uint8_t>> pushed_;
  std::mt19937_64 shuffle_rng_;
  StepPhases last_phases_;
  HostAggregator aggregator_;

  // The pull's receive state. Locking rule: written by the driving thread
  // (arming a pull, Reset) and by OnParams and its landings on the progress
  // thread, always under mu_; WaitForParams' condition reads it under mu_.
  // mu_ is taken before the channel's, never while the channel's is held,
  // and never around a call into the aggregator. The buffers themselves are
  // the driving thread's, except that OnParams reads where they lie (under
  // mu_) and Retire replaces them (under mu_).
  mutable absl::Mutex mu_;
  int64_t expect_version_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t expect_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  // Host aggregation: PARAMS of it are passed on.
  int64_t forward_version_ ABSL_GUARDED_BY(mu_) = -1;
  // Landed, not yet handed to the transport to pass on.
  int64_t forwarding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expected_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time first_received_at_ ABSL_GUARDED_BY(mu_);  // this pull's first and last bucket
  absl::Time last_received_at_ ABSL_GUARDED_BY(mu_);
  std::vector<int> received_by_shard_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_BUCKET_EXCHANGE_H_
