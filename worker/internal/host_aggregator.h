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
// Threads: the driving thread calls everything but OnPush, which runs on the
// transport's progress thread; slot bookkeeping is under the channel's mu().
#ifndef TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_
#define TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "transport/payload_vector.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class HostAggregator {
 public:
  HostAggregator(JobContext* ctx, DataChannel* channel);

  // `groups`: per rank (JobSpec.rank_groups); empty = flat. Needs the layout.
  void Configure(const std::vector<int>& groups);
  // This rank shares its host's buckets with other ranks.
  bool active() const { return members_.size() > 1; }
  // The ranks of this rank's group, ascending.
  const std::vector<int>& members() const { return members_; }

  // The rank that sums (shard, bucket) for this rank's group.
  int AggregatorOf(int shard, int bucket) const {
    if (static_cast<size_t>(shard) >= aggregator_.size()) return me_;  // not configured: flat
    return aggregator_[static_cast<size_t>(shard)][static_cast<size_t>(bucket)];
  }
  bool Aggregates(int shard, int bucket) const { return AggregatorOf(shard, bucket) == me_; }
  // The buckets of `shard` this rank aggregates: [first, first + count).
  void PullRange(int shard, int* first, int* count) const;

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
  // Under the channel's mu(): a receive may still be writing into a slot.
  void RetireLocked(bool stuck, std::vector<PayloadVector<float>>* retired);

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
  // Index into owned_ of (shard, bucket), -1 if another rank aggregates it.
  int OwnedIndex(int shard, int bucket) const {
    return owned_index_[static_cast<size_t>(shard)][static_cast<size_t>(bucket)];
  }
  bool CompleteLocked(const Owned& o, int64_t step) const;
  void ConfigureLocked(const std::vector<int>& groups);
  // Waits until done(m) holds (under the channel's mu()) for every other
  // member; the deadline's message names those it does not hold for.
  absl::Status AwaitOthers(const std::function<bool(int)>& done, const std::string& what);
  // Sums o's group in rank order and pushes it (driving thread).
  void SumAndPush(Owned* o);
  // Under the channel's mu(): forgets the borrows of o's pushes and adds
  // their leases to `leases`, for Release() without the lock (the transport's
  // thread holds its own lock while it calls in under mu()).
  using Leases = std::vector<std::pair<PeerId, uint64_t>>;
  static void TakeLeasesLocked(Owned* o, Leases* leases);
  void Release(const Leases& leases);
  float* Slot(int other, const Owned& o) {
    return slots_.data() + static_cast<int64_t>(other) * slot_elems_ + o.at;
  }

  JobContext* const ctx_;
  DataChannel* const channel_;
  int me_ = 0;
  std::vector<int> members_;                   // this rank's group, ascending
  std::vector<int> others_;                    // members_ without me_
  std::vector<int> other_index_;               // rank -> index in others_, -1
  std::vector<std::vector<int>> aggregator_;   // [shard][bucket] -> rank
  std::vector<std::vector<int>> owned_index_;  // [shard][bucket] -> owned_ index
  std::vector<Owned> owned_;
  int64_t slot_elems_ = 0;
  PayloadVector<float> slots_;    // [other][owned elements]
  PayloadVector<float> partial_;  // the group's sum of each owned bucket
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_HOST_AGGREGATOR_H_
