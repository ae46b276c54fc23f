// BucketReducer: one shard's receive side of a step and the rank-order sum
// of each bucket's gradient pushes. It knows where every rank's push of every
// bucket lies until it is summed (a pooled receive buffer, a rank's top-k
// buffer, or the worker's own memory for a borrowed push), and sums a
// bucket's pushes left to right in rank order: early, for the ranks that
// landed in rank order (a fold, into an accumulator), and in full once the
// bucket is complete (the sum an update reads).
//
// Contract:
//   The sum. SumChunks hands the update the sources of one left-to-right sum
//   over ranks 0..W-1, chunk by chunk: the accumulator (ranks 0..k-1 folded
//   already, k >= 2) then ranks k..W-1, or ranks 0..W-1 alone. Reduced in
//   order (core/reduce.h's ReduceMean/ReduceAndApply with divisor W),
//   they give the same bits as one reduction of ranks 0..W-1, whatever order
//   the ranks arrived in, whether folds ran at once, late or never, and
//   whether a push was copied or borrowed. Half pushes are widened to fp32
//   exactly, kWidenChunk elements at a time (element-wise: no bit changes).
//   Top-k pushes are densified, a whole bucket at a time, and never folded.
//   The pool. A copied push lands in a bucket-sized buffer taken from the
//   bucket's pool when it is accepted (allocated only when the pool is
//   empty: after the first steps, never on the step path) and given back
//   once it is summed (by a fold or EndSum). A failed receive keeps its
//   buffer for the rank's retry. A borrowed push needs none; its lease is
//   dropped by whoever holds EndSum's answer (or with the reducer).
//   Prefix folds (fold_prefix, W >= 3, not top-k): Land asks for a fold
//   (Landing::fold) when ranks 0..k-1 (k >= 2) have landed past what is
//   folded and no fold of the bucket is queued; Fold sums them into the
//   accumulator, and again while more land in order; it stops once the
//   bucket is complete or its sum began. Optional: a fold never run leaves
//   more of the sum to SumChunks.
//   Micro-batch parts (dense: fp32 or half, not top-k): a rank may send a
//   bucket's gradients in parts before its push (AcceptPart, LandPart): the
//   first part lands in the rank's pooled buffer, each later part and the
//   push itself in a second one and is added into it element by element, in
//   the job's precision (half: each add rounds to the half type,
//   core/precision.h's AddHalfInto, as torch's in-place add of a half .grad
//   does), so the rank's push is the sum of its parts and push in the order
//   they came (each rank's micro-batches in order, then the usual rank-order
//   sum: what each rank accumulating locally gives, bit for bit). A part is
//   not a landing: it completes nothing and is never folded; a push after
//   parts is copied (Accept with borrow=false). The caller refuses top-k
//   parts.
//   An abandoned receive (Abandon: its sender's process was replaced and the
//   transport may still write into its buffer, whenever, or never) retires
//   the buffer it was receiving into: out of the pool, never read or handed
//   out again, freed with the reducer (top-k: the rank's pairs buffer is
//   copied to a new one, the old one retired). The slot's next Accept gets
//   another buffer.
//   Per bucket and step: Accept, Land/LandBorrowed for each rank (Accept
//   only for a slot the caller's protocol has free; the caller validates
//   frames), then, once Land said `complete`, BeginSum, SumChunks, EndSum
//   (which makes the bucket's slots free for the next step).
//
// Threads: any; the bookkeeping is under mu_. Folds, SumChunks and the
// callers' reductions read pushes and the accumulator outside mu_, on
// buckets no one else writes meanwhile (the protocol above guarantees it).
// Two folds of a bucket never run at once; BeginSum waits for a running one.
// Never calls out while holding mu_: an owner may call in under its own lock
// (except BeginSum, which may wait for a fold).
//
// Example:
//   BucketReducer::Options options;
//   options.world = 3;
//   options.buckets = {{0, 1024}};
//   BucketReducer reducer(options);
//   void* to = reducer.Accept(0, rank, /*borrow=*/false);  // receive into it
//   absl::StatusOr<BucketReducer::Landing> l = reducer.Land(0, rank);
//   if (l->fold) reducer.Fold(0);  // on a compute thread, or never
//   if (l->complete) {
//     reducer.BeginSum(0);
//     reducer.SumChunks(0, [&](Range part, const float* const* srcs, int count) {
//       ReduceMean(srcs, count, out + part.begin, part.size(), /*divisor=*/3);
//     });
//     std::vector<std::shared_ptr<void>> released = reducer.EndSum(0);
//   }
#ifndef TESSEL_SERVER_BUCKET_REDUCER_H_
#define TESSEL_SERVER_BUCKET_REDUCER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/layout.h"
#include "core/precision.h"
#include "core/wire.h"

namespace tessel {

class BucketReducer {
 public:
  // Mixed precision: elements of each rank's gradient widened to fp32 at a
  // time (64 KiB per rank: the chunk stays in cache for the reduction).
  static constexpr int64_t kWidenChunk = 16384;

  struct Options {
    int world = 1;
    // Each bucket's elements, as offsets into the shard's range (ascending,
    // within [0, shard_elements)).
    std::vector<Range> buckets;
    int64_t shard_elements = 0;    // 0: the end of the last bucket
    std::optional<HalfType> half;  // pushes carry half floats
    double topk_ratio = 0;         // > 0: pushes carry top-k pairs
    bool fold_prefix = true;
  };
  explicit BucketReducer(Options options);
  // Drops the leases of borrowed pushes not summed (a job that ends).
  ~BucketReducer() = default;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  // Off: buckets are summed only once complete. Call before the first push.
  void set_fold_prefix(bool on);
  int world() const { return world_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Bytes a push of `bucket` carries on the wire (top-k: its pairs).
  uint64_t push_bytes(int bucket) const;

  // Rank's push of `bucket` was accepted: where its payload goes (a pooled
  // buffer, or the rank's top-k buffer), or nullptr with `borrow` (it will
  // be read where the worker keeps it: LandBorrowed).
  void* Accept(int bucket, int rank, bool borrow);
  struct Landing {
    bool complete = false;  // every rank of the bucket landed: sum it
    bool fold = false;      // run Fold(bucket) when a thread is free
  };
  // The payload Accept placed landed. Top-k pairs are checked first: a
  // malformed push is InvalidArgument (core/topk.h's words) and records
  // nothing (the rank may push again).
  absl::StatusOr<Landing> Land(int bucket, int rank);
  // A micro-batch part of rank's `bucket` (dense jobs, not top-k): where
  // it goes. LandPart adds it to the rank's parts so far (the first is
  // kept as it is). Neither lands the rank's push.
  void* AcceptPart(int bucket, int rank);
  void LandPart(int bucket, int rank);
  // The rank's push of `bucket` has parts before it: copy it (Accept's
  // borrow=false), it is added to them.
  bool HasParts(int bucket, int rank);

  // A borrowed push: its gradient lies at `data` (the bucket's first
  // element) until `lease` is dropped.
  Landing LandBorrowed(int bucket, int rank, const void* data, std::shared_ptr<void> lease);

  // What a Fold summed: pushes and microseconds.
  struct Folded {
    int64_t pushes = 0;
    int64_t us = 0;
  };
  Folded Fold(int bucket);

  using ChunkFn = std::function<void(Range part, const float* const* srcs, int count)>;
  // The update of a complete bucket: BeginSum waits for a fold of it that
  // runs; SumChunks calls `fn` for each chunk `part` (shard offsets) of the
  // bucket, in order, with the sources of the rank-order sum over it (valid
  // during the call) (half pushes of a bucket of 2 x UpdatePool::kMinChunk
  // elements or more, on a thread with an UpdatePool: from the pool's
  // threads at once, on disjoint chunks, returning once all are done); EndSum gives the bucket's
  // buffers back to the pool, resets its slots and fold for the next step, and returns the leases
  // of its borrowed pushes (drop them to release the pushes).
  void BeginSum(int bucket);
  void SumChunks(int bucket, const ChunkFn& fn);
  std::vector<std::shared_ptr<void>> EndSum(int bucket);

  // The receives of rank's pushes (or parts) of `buckets` that Accept (or
  // AcceptPart) placed will not be landed: their buffers are retired (the
  // file comment). Returns the bytes retired (0: borrowed, nothing to
  // retire). Only for slots accepted and not landed.
  int64_t Abandon(int rank, const std::vector<int>& buckets);

  // Receive memory as allocated: pooled buffers (held and spare), top-k
  // buffers, the accumulator, and retired buffers.
  int64_t buffer_bytes();
  // Of which retired by Abandon.
  int64_t retired_bytes();

 private:
  size_t wire_bytes() const { return WireElementBytes(half_.has_value()); }
  // Per rank, where its push of `bucket` lies (borrowed or held).
  void LandedLocked(int bucket, std::vector<const void*>* landed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Landing RecordLocked(int bucket, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A bucket-sized buffer from `bucket`'s pool (allocated if it is empty).
  std::unique_ptr<float[]> TakeLocked(int bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The part or push in incoming_[bucket][rank] is added into the rank's
  // held sum (outside mu_) and its buffer goes back to the pool.
  void AddIncoming(int bucket, int rank) ABSL_LOCKS_EXCLUDED(mu_);
  // Ranks [from, to) of `bucket` are summed: their buffers go to the pool.
  void ReturnBuffersLocked(int bucket, int from, int to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank r's part [off, off + n) of the shard, from where its push lies
  // (`landed`, the bucket's first element at shard offset bucket_at),
  // widened from half into `scratch` (n floats).
  const float* RankChunk(int r, const std::vector<const void*>& landed, size_t bucket_at,
                         size_t off, size_t n, float* scratch) const;
  // The sources of a left-to-right sum over that chunk: the accumulator
  // (`with_acc`), then ranks [from, to) by RankChunk, widening into
  // `widened` (grown as needed). Fills `srcs`; returns how many.
  int ChunkSources(const std::vector<const void*>& landed, size_t bucket_at, size_t off, size_t n,
                   bool with_acc, int from, int to, std::vector<float>* widened,
                   std::vector<const float*>* srcs) const;

  const int world_;
  const std::vector<Range> buckets_;
  const int64_t shard_elements_;
  const std::optional<HalfType> half_;
  const double topk_ratio_;
  // Top-k: per bucket, where its pairs start in a rank's sparse buffer
  // (allocated on the rank's first push).
  std::vector<uint64_t> sparse_offset_;

  absl::Mutex mu_;
  bool fold_prefix_ ABSL_GUARDED_BY(mu_);
  // [bucket][rank]: the copied push (its pooled buffer, kept for a retry
  // after a failed receive), and [bucket]: the pool. Floats; a half push
  // fills the first half.
  std::vector<std::vector<std::unique_ptr<float[]>>> held_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::unique_ptr<float[]>>> spare_ ABSL_GUARDED_BY(mu_);
  int64_t pool_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // held and spare
  // Buffers an abandoned receive may still write into (Abandon), and their
  // bytes.
  std::vector<std::unique_ptr<float[]>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint8_t>> retired_sparse_ ABSL_GUARDED_BY(mu_);
  int64_t retired_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Per rank: its top-k pairs of every bucket (allocated under mu_ on the
  // rank's first push, replaced by Abandon under mu_; SumChunks reads the
  // buffers outside it, taking their addresses under it).
  std::vector<std::vector<uint8_t>> rank_sparse_ ABSL_GUARDED_BY(mu_);
  // [bucket][rank]: the held buffer is the sum of parts; and where the next
  // part (or the push after parts) is received before it is added.
  std::vector<std::vector<uint8_t>> parts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::unique_ptr<float[]>>> incoming_ ABSL_GUARDED_BY(mu_);
  // [bucket][rank]: a borrowed push (its bucket's first element in the
  // worker's memory) and its lease, or null.
  std::vector<std::vector<const void*>> borrowed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::shared_ptr<void>>> leases_ ABSL_GUARDED_BY(mu_);
  // [bucket][rank]: landed this step; [bucket]: how many.
  std::vector<std::vector<uint8_t>> landed_ ABSL_GUARDED_BY(mu_);
  std::vector<int> landed_count_ ABSL_GUARDED_BY(mu_);
  // Prefix folds: the running sum of each bucket's first ranks (one
  // shard-sized buffer, allocated when the first fold is asked for; written
  // by folds outside mu_, one per bucket at a time), and per bucket: how
  // many ranks landed in rank order, how many are summed into acc_ (0, or
  // >= 2), whether a fold was asked for or runs, and whether its sum began.
  std::vector<float> acc_;
  std::vector<int> landed_prefix_ ABSL_GUARDED_BY(mu_);
  std::vector<int> folded_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> fold_queued_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> fold_running_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> summing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_BUCKET_REDUCER_H_
