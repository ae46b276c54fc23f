// HostAggregator: this rank's part of hierarchical aggregation
// (docs/hierarchical.md) for the full-buffer strategies (ddp, zero1, zero2
// without units; fp32). The ranks of one host form a group; each bucket has
// one aggregator among them (host_groups.h). For a bucket it aggregates, this
// rank receives the other members' gradients (their PUSH frames, sent to it
// instead of the shard), sums the group's gradients in rank order
// (ReduceSum) into its own buffer, pushes that partial sum to the shard,
// pulls the bucket and forwards the PARAMS frame to the other members. For a
// bucket another member aggregates, this rank sends its PUSH there and gets
// the parameters from it. With no groups (flat), or alone on its host, this
// rank aggregates every bucket and has no one to wait for: the flat path.
//
// Contract:
//   - Configure() (driving thread, nothing in flight: the start, or a
//     recovery) sets the groups and this rank; it sizes one receive slot per
//     (member, bucket aggregated) in the transport's payload memory.
//   - A member's PUSH is taken only for a bucket this rank aggregates, of the
//     current epoch, fp32-sized, for a slot whose last push was summed; any
//     other is dropped and counted stale, never summed. A push the transport
//     can show in place (UCX shared memory) is summed where the member keeps
//     it and released once summed (its sender's send completes then); others
//     are copied into the slot.
//   - A bucket is summed and pushed once per step, when this rank's own
//     gradient (OwnReady) and every member's push of that step are in.
//   - PushAll() returns once every bucket this rank aggregates was pushed
//     this step (or the channel's wait fails: a member died, a deadline).
//
// Threads: the driving thread calls everything but OnPush and Forwards,
// which run on the transport's progress thread (as do the receives OnPush
// starts). Slot bookkeeping is under the aggregator's own mutex (mu_, below),
// never the channel's.
//
// Example: each rank of a host, after the layout is registered:
//   HostAggregator aggregator(&ctx, &channel);
//   aggregator.Configure(ctx.rank_groups);  // e.g. {0, 0}: ranks 0 and 1 share a host
//   TESSEL_RETURN_IF_ERROR(aggregator.Meet());
//   // per bucket: the aggregator sums, every other member sends its PUSH there
//   if (aggregator.Aggregates(s, b)) aggregator.OwnReady(s, b, grads + begin);
//   TESSEL_RETURN_IF_ERROR(aggregator.PushAll());  // every owned bucket pushed
#ifndef TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_
#define TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "transport/payload_vector.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class HostAggregator {
 public:
  HostAggregator(JobContext* ctx, DataChannel* channel);

  // `groups`: per rank (JobSpec.rank_groups); empty = flat. Needs the layout.
  void Configure(const std::vector<int>& groups);
  // The configuration (driving thread; Configure is its only writer):
  // this rank shares its host's buckets with other ranks.
  bool active() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return members_.size() > 1; }
  // The ranks of this rank's group, ascending.
  const std::vector<int>& members() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return members_; }
  // The rank that sums (shard, bucket) for this rank's group.
  int AggregatorOf(int shard, int bucket) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return AggregatorOfLocked(shard, bucket);
  }
  bool Aggregates(int shard, int bucket) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return AggregatorOfLocked(shard, bucket) == me_;
  }
  // The buckets of `shard` this rank aggregates: [first, first + count).
  void PullRange(int shard, int* first, int* count) const;
  // Any thread: whether this rank passes the PARAMS of (shard, bucket) on to
  // the other members (active, and it aggregates the bucket).
  bool Forwards(int shard, int bucket) const;

  // After Configure, on every member of the group: tells the others this
  // rank takes their pushes now (a READY frame of the epoch) and waits until
  // each of them said the same, so no push reaches a member that does not
  // know its groups yet.
  absl::Status Meet();

  // This rank's gradient of (shard, bucket) for the current step is final
  // at `src` (a bucket it aggregates): sums and pushes it now if every
  // member's push is in, else PushAll does.
  void OwnReady(int shard, int bucket, const float* src);
  // Waits for the members' pushes of every bucket this rank aggregates and
  // pushes each as it is complete.
  absl::Status PushAll();
  // Tells the other members this rank is in its exchange of `version` (a
  // PULL frame): its backward pass no longer reads its parameters.
  void AnnouncePull(int64_t version);
  // Waits until every other member announced `version`: only then may this
  // rank pull, since the parameters it passes on land in their buffers.
  absl::Status AwaitPulls(int64_t version);
  // Sends a PARAMS frame this rank received for a bucket it aggregates, from
  // where it landed, to the other members.
  void Forward(const FrameHeader& h, const void* payload);

  // A member's PUSH (progress thread).
  Accept OnPush(const FrameHeader& h, const Incoming& in);

  // A recovery starts: forget every push and summed step.
  void Reset();
  // After a recovery's SettleReceives: if a receive may still be writing
  // into a slot (stuck), the slots are retired (kept, never read) and replaced.
  void Retire(bool stuck, std::vector<PayloadVector<float>>* retired);

 private:
  struct Owned {
    int shard = 0;
    int bucket = 0;
    int64_t begin = 0;  // in the model
    int64_t size = 0;
    int64_t at = 0;               // offset in each member's slot area
    const float* own = nullptr;   // this step's own gradient, once ready
    int64_t own_step = -1;        // step OwnReady was called for
    int64_t summed_step = -1;     // last step summed and pushed
    std::vector<int64_t> landed;  // per other member: step of its push in the slot
    std::vector<uint8_t> receiving;
    // Per other member: its push read in place (nullptr: in the slot), and
    // the transport's lease on it, released once summed.
    std::vector<const float*> borrowed;
    std::vector<std::pair<PeerId, uint64_t>> lease;
  };
  int AggregatorOfLocked(int shard, int bucket) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (static_cast<size_t>(shard) >= aggregator_.size()) return me_;  // not configured: flat
    return aggregator_[static_cast<size_t>(shard)][static_cast<size_t>(bucket)];
  }
  // Index into owned_ of (shard, bucket), -1 if another rank aggregates it
  // (or it is no bucket of the layout).
  int OwnedIndexLocked(int shard, int bucket) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (shard < 0 || static_cast<size_t>(shard) >= owned_index_.size() || bucket < 0 ||
        static_cast<size_t>(bucket) >= owned_index_[static_cast<size_t>(shard)].size()) {
      return -1;
    }
    return owned_index_[static_cast<size_t>(shard)][static_cast<size_t>(bucket)];
  }
  bool CompleteLocked(const Owned& o, int64_t step) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void ConfigureLocked(const std::vector<int>& groups) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until done(m) holds for every other member; the deadline's
  // message names those it does not hold for. `done` runs without mu_.
  absl::Status AwaitOthers(const std::function<bool(int)>& done, const std::string& what);
  // Sums o's group in rank order and pushes it (driving thread).
  void SumAndPush(size_t index);
  // A member's push into its slot landed (progress thread).
  void SlotLanded(int64_t epoch, size_t index, size_t other, int64_t step);
  // Forgets the borrows of o's pushes and adds their leases to `leases`,
  // for Release() without the lock (the transport's thread holds its own
  // lock while it calls in).
  using Leases = std::vector<std::pair<PeerId, uint64_t>>;
  static void TakeLeasesLocked(Owned* o, Leases* leases);
  void Release(const Leases& leases);
  float* SlotLocked(size_t other, const Owned& o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return slots_.data() + static_cast<int64_t>(other) * slot_elems_ + o.at;
  }

  JobContext* const ctx_;
  DataChannel* const channel_;

  // Locking rule: everything below is under mu_. The configuration (me_ to
  // owned_index_) is written only by Configure on the driving thread, so the
  // driving thread may read it without mu_ (the const accessors above); the
  // progress thread reads it under mu_. owned_'s step bookkeeping is written
  // by both threads, always under mu_; so are the vectors slots_ and
  // partial_ (their storage), while their contents are written by the
  // transport and by SumAndPush one bucket at a time, as that bookkeeping
  // allows. mu_ is taken before the channel's, never while it is held.
  mutable absl::Mutex mu_;
  int me_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;  // the epoch configured in: pushes of others are stale
  std::vector<int> members_ ABSL_GUARDED_BY(mu_);                   // this rank's group, ascending
  std::vector<int> others_ ABSL_GUARDED_BY(mu_);                    // members_ without me_
  std::vector<int> other_index_ ABSL_GUARDED_BY(mu_);               // rank -> index in others_, -1
  std::vector<std::vector<int>> aggregator_ ABSL_GUARDED_BY(mu_);   // [shard][bucket] -> rank
  std::vector<std::vector<int>> owned_index_ ABSL_GUARDED_BY(mu_);  // [shard][bucket] -> owned_
  std::vector<Owned> owned_ ABSL_GUARDED_BY(mu_);
  int64_t slot_elems_ ABSL_GUARDED_BY(mu_) = 0;
  PayloadVector<float> slots_ ABSL_GUARDED_BY(mu_);    // [other][owned elements]
  PayloadVector<float> partial_ ABSL_GUARDED_BY(mu_);  // the group's sum of each owned bucket
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_
