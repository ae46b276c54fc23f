// PullWaitlist: the PULLs a shard cannot answer in full yet, those for the
// step in progress (or for the first step, before INIT completes), and which
// of their buckets each has been sent. Pipelined serving: while step v is in
// flight, each bucket goes to the pulls of v as soon as its update ends; the
// rest of a pull's buckets go when the version reaches v.
//
// Contract:
//   Add(p)                a pull of the step in progress: the buckets of
//                         p's range that step already updated are returned
//                         to send now (nullopt if none); the pull waits for
//                         the rest.
//   BucketUpdated(v, b)   bucket b of step v was updated: each waiting pull
//                         of v whose range holds b and that lacks it gets it
//                         (appended to `serve`), exactly once.
//   Reached(v)            the version is v: every pull of v leaves the list
//                         with the buckets it still lacks (a notify pull,
//                         bucket_count 0, with none), and no bucket counts as
//                         updated any more (the next step starts).
//   TakeAll()             every waiting pull, handed over and forgotten.
// Every pull thus gets each bucket of its range once. Pure bookkeeping.
//
// Threads: none and no lock: the owner (ShardJob) serializes every call.
//
// Example:
//   PullWaitlist pulls(/*num_buckets=*/4);
//   std::optional<Puller> now = pulls.Add(puller);  // send now->buckets
//   std::vector<Puller> serve;
//   pulls.BucketUpdated(/*version=*/1, /*bucket=*/2, &serve);
//   pulls.Reached(1, &serve);  // the step ended: the rest of every pull of 1
#ifndef TESSEL_SERVER_PULL_WAITLIST_H_
#define TESSEL_SERVER_PULL_WAITLIST_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace tessel {

// A PULL: who asked (an opaque reply token), for which version and which
// buckets; in a serve, also the buckets to send it now.
struct Puller {
  uint64_t reply_to;
  int32_t rank;
  int64_t version;
  int first_bucket = 0;
  int bucket_count = 0;  // 0: notify only (an empty PARAMS frame)
  // In a serve: the buckets of [first_bucket, first_bucket + bucket_count)
  // to send now, at `version` (a deferred pull gets each bucket once, as
  // its update ends). Empty for a notify.
  std::vector<int> buckets;
};

class PullWaitlist {
 public:
  explicit PullWaitlist(int num_buckets) : updated_(static_cast<size_t>(num_buckets), 0) {}

  std::optional<Puller> Add(Puller p);
  void BucketUpdated(int64_t version, int bucket, std::vector<Puller>* serve);
  void Reached(int64_t version, std::vector<Puller>* serve);
  std::vector<Puller> TakeAll();
  bool empty() const { return waiting_.empty(); }
  // The ranks (ascending, distinct) with a pull of `version` waiting.
  std::vector<int> RanksWaitingFor(int64_t version) const;

 private:
  // A waiting pull; `sent` marks, per bucket of its range, those sent.
  struct Waiting {
    Puller puller;
    std::vector<uint8_t> sent;
  };
  std::vector<Waiting> waiting_;
  // Per bucket: updated in the step in progress.
  std::vector<uint8_t> updated_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_PULL_WAITLIST_H_
