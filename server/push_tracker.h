// PushTracker: one shard's bookkeeping of the step in progress. Per bucket
// and rank it knows whether the rank's push has not come yet, is being
// received, or has landed; it says when a bucket is complete (every rank's
// push landed, so the bucket can be reduced); it holds the micro-batch parts
// taken this step (parts(), server/push_parts.h); it runs the step's stall
// clock; and it describes what a stalled step waits for.
//
// Contract:
//   Reserve(b, r, now)  an empty slot starts receiving; the first reserve of
//                       a step starts the stall clock at `now`. Returns the
//                       reservation's ticket (never 0, never reused), which
//                       the receive's completion shows (Holds) before it
//                       completes or releases the slot.
//   Holds(b, r, t)      the slot is receiving under ticket t (0: under any):
//                       false for a receive that was abandoned, even once the
//                       slot was reserved again (a new ticket) or its step
//                       ended. Such a completion changes nothing.
//   Abandon(sender)     the receives `sender` (a rank) reserved and that have
//                       not finished: each slot is empty again (owed, as a
//                       failed receive leaves it) and its ticket void; their
//                       buckets and parts (-1: a push) are returned. (Its
//                       process was replaced: rank handover.)
//   Release(b, r)       a failed receive: the slot is empty again (the rank
//                       may push the bucket again). The clock keeps running.
//   Receive(b, r)       the payload landed; true exactly when this completed
//                       bucket b.
//   parts()             the step's micro-batch parts (PushParts: each taken
//                       once, a replay refused).
//   NextStep(s, now)    step s ended (the version moved past it): every
//                       slot empty, no part taken, clock stopped; the
//                       step's arrival times go into the flight recorder.
//   StopClock()         no step is in progress any more (the caller knows):
//                       the next reserve starts a new clock (and the flight
//                       recorder forgets the abandoned step's arrivals).
//   flight()            when each rank's pushes arrived over the last steps
//                       (server/flight_recorder.h): Reserve records them;
//                       the owner records pulls and bytes (mutable_flight).
//   WaitingSlots()      per slot that owes the step something: the buckets
//                       not pushed and those being received (GetStats).
//   started()           when the step in progress began (its first reserve).
//   StallDue(now, d)    the clock has run for more than d and the step was
//                       not reported within the last d: returns how long it
//                       has run and marks it reported. So a caller polling
//                       more often reports a stall once every d.
// Calls that break the protocol (a reserve of a taken slot, a receive of a
// slot not receiving, an index out of range) are programmer errors, asserted
// in debug builds: the caller (ShardJob) validates frames first.
//
// Threads: none of its own and no lock: the owner serializes every call
// (ShardJob holds its mutex). Pure: the caller supplies the time.
//
// Example:
//   PushTracker pushes(/*num_buckets=*/4, /*world=*/2);
//   pushes.Reserve(0, 1, absl::Now());  // also the flight recorder's arrival
//   if (pushes.Receive(0, 1)) { /* bucket 0 is complete: reduce it */ }
//   if (auto age = pushes.StallDue(absl::Now(), absl::Seconds(30))) {
//     PushTracker::Waiting w = pushes.DescribeWaiting(worker_ids);  // for the log
//   }
#ifndef TESSEL_SERVER_PUSH_TRACKER_H_
#define TESSEL_SERVER_PUSH_TRACKER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/flight_recorder.h"
#include "server/push_parts.h"

namespace tessel {

class PushTracker {
 public:
  enum class Slot : uint8_t { kEmpty, kReceiving, kReceived };

  PushTracker(int num_buckets, int world);

  Slot slot(int bucket, int rank) const { return slots_[bucket][rank]; }
  // Some rank has pushed (or is pushing) some bucket of this step.
  bool AnyPushed() const;
  // Every rank's push of `bucket` landed this step: its update is due or done.
  bool Complete(int bucket) const { return received_[bucket] == world_; }

  // `sender`: the rank whose frame reserves (default: the slot's own rank;
  // host aggregation: a rank of the group), and `part` the micro-batch part's
  // index (-1: the push itself).
  uint64_t Reserve(int bucket, int rank, absl::Time now, int sender = -1, int part = -1);
  bool Holds(int bucket, int rank, uint64_t ticket) const;
  struct Abandoned {
    int bucket = 0;
    int slot = 0;
    int part = -1;
  };
  std::vector<Abandoned> Abandon(int sender);
  // By rank, not by group: each rank's parts are its own.
  PushParts& parts() { return parts_; }
  void Release(int bucket, int rank);
  bool Receive(int bucket, int rank);
  void NextStep(int64_t step, absl::Time now);
  void StopClock();
  const FlightRecorder& flight() const { return flight_; }
  FlightRecorder& mutable_flight() { return flight_; }
  std::optional<absl::Time> started() const { return started_; }
  std::optional<absl::Duration> StallDue(absl::Time now, absl::Duration after);

  // What the step waits for, one entry per rank that owes something, in
  // rank order: e.g. "rank 1 (buckets 0-3 of 4)", or with registry ranks
  // (`worker_ids`, by data-parallel rank; may be empty or shorter)
  // "rank 1 (registry rank 5; bucket 2 of 4)".
  struct Waiting {
    std::vector<std::string> pushes;    // buckets not pushed yet
    std::vector<std::string> receives;  // buckets whose payload is on its way
    bool empty() const { return pushes.empty() && receives.empty(); }
    // For the stall report (docs/errors.md): "waiting for pushes from A, B;
    // receives not finished from C", either part alone, "" if empty().
    std::string ToString() const;
  };
  Waiting DescribeWaiting(const std::vector<int>& worker_ids) const;
  // Hierarchical aggregation tracks a slot per group (`group_of_rank`, by
  // rank): "group 1 (ranks 2,3; bucket 0 of 1)".
  Waiting DescribeGroupsWaiting(const std::vector<int>& group_of_rank) const;
  // The same, as numbers: slots (ranks, or host groups) in order.
  struct SlotWaiting {
    int slot = 0;
    std::vector<int> not_pushed;  // buckets, ascending
    std::vector<int> receiving;
  };
  std::vector<SlotWaiting> WaitingSlots() const;

 private:
  // Each slot's name and the opening of its parenthesis come from `who`.
  Waiting DescribeWaitingAs(const std::function<std::string(int slot)>& who) const;

  const int num_buckets_;
  const int world_;
  std::vector<std::vector<Slot>> slots_;  // [bucket][rank]
  std::vector<int> received_;             // per bucket: ranks whose push landed
  // [bucket][rank] while receiving: the reservation's ticket (0 otherwise),
  // the rank whose frame reserved it and its part (-1: a push).
  struct Reservation {
    uint64_t ticket = 0;
    int sender = -1;
    int part = -1;
  };
  std::vector<std::vector<Reservation>> reservations_;
  uint64_t next_ticket_ = 1;
  PushParts parts_;
  FlightRecorder flight_;
  // When the step's first push was reserved (nullopt: no step in progress),
  // and when StallDue last reported it.
  std::optional<absl::Time> started_;
  std::optional<absl::Time> reported_;
};

// "bucket 2 of 4", "buckets 0-3 of 4", "buckets 0-2, 5, 7-9 of 12": the
// buckets (ascending, not empty) of a shard that has `total`.
std::string DescribeBuckets(const std::vector<int>& buckets, int total);

}  // namespace tessel

#endif  // TESSEL_SERVER_PUSH_TRACKER_H_
