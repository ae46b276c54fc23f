// FrameChecks: the refusals of the step protocol, for the frames a shard
// job receives (INIT, PUSH, PULL), each with a status naming the problem
// and what to do. Pure: the job hands it the state the rules read (its
// epoch, version, whether it is initialized, the slot's state), under its
// own lock, and counts the refusals.
//
// Contract, in the order checked (the first that fails is returned):
//   Every frame: for another job (NotFound); from another membership epoch
//     (FailedPrecondition, and `stale_epoch` set); addressed to another
//     shard or from a rank outside [0, W) (InvalidArgument).
//   INIT and PUSH: a bucket outside the shard's; a payload of the wrong
//     size (INIT: fp32 masters; PUSH: the wire precision, or top-k pairs);
//   INIT: refused by a job that holds no parameters (DDP), from a rank other
//     than 0, once initialized (or for a step other than 0), or repeated for
//     a bucket; PUSH: any other frame type carries no gradient; refused
//     before INIT completes, for a step other than the version, or when the
//     rank already pushed the bucket this step.
//   PULL: a payload; a bucket range outside the shard's; a version older
//     than the shard's or more than one step ahead. CheckPull returns
//     whether the version is ready (answer now: the shard's version, also
//     while the next step is in flight, whose updates leave it whole,
//     server/served_versions.h) or in flight (the next step).
//
// Threads: const after construction; any thread.
//
// Example:
//   FrameChecks checks(shape);
//   bool stale = false;
//   absl::Status s = checks.CheckData(h, {epoch, version, initialized}, seen, empty, &stale);
#ifndef TESSEL_SERVER_FRAME_CHECKS_H_
#define TESSEL_SERVER_FRAME_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/wire.h"

namespace tessel {

class FrameChecks {
 public:
  // What the checks know of a job's shard.
  struct Shape {
    std::string where;  // "job 'J' shard S: ", the start of every refusal
    uint64_t job_id = 0;
    int shard = 0;
    int world = 1;
    std::vector<int64_t> bucket_elements;  // per bucket of the shard
    std::vector<uint64_t> push_bytes;      // per bucket: a PUSH's payload
    bool half = false;                     // PUSH carries half floats
    double topk_ratio = 0;                 // PUSH carries top-k pairs
    bool holds_params = true;              // false: DDP, no INIT
  };
  // The job's state the rules read.
  struct State {
    int64_t epoch = 0;
    int64_t version = 0;
    bool initialized = false;
    // The version before `version` while its served values are still whole
    // (served_versions.h: no bucket of the step in flight updated yet), else
    // -1. A replacement worker (issue 44) pulls it from a shard that its dead
    // predecessor had already taken to `version`.
    int64_t previous_whole = -1;
  };
  explicit FrameChecks(Shape shape) : s_(std::move(shape)) {}

  int num_buckets() const { return static_cast<int>(s_.bucket_elements.size()); }
  // INIT or PUSH. `init_seen`: an INIT of h.bucket arrived already;
  // `slot_empty`: h.rank has not pushed h.bucket this step.
  absl::Status CheckData(const FrameHeader& h, const State& st, bool init_seen, bool slot_empty,
                         bool* stale_epoch) const;
  enum class PullAt { kReady, kInFlight };
  absl::StatusOr<PullAt> CheckPull(const FrameHeader& h, const State& st, bool* stale_epoch) const;
  // NORM_ASK or RELEASE (a held step, server/step_hold.h): addressed to
  // this job, shard, epoch and a rank of it; no payload; a job whose shards
  // hold the parameters (DDP's workers clip themselves), initialized. The
  // step is StepHold's to judge.
  absl::Status CheckHeld(const FrameHeader& h, const State& st, bool* stale_epoch) const;

 private:
  absl::Status CheckAddress(const FrameHeader& h, const State& st, bool* stale_epoch) const;
  const Shape s_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_FRAME_CHECKS_H_
