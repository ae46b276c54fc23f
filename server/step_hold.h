// StepHold: the held step of one shard job, the server's part of clipping by
// the job-wide gradient norm with the gradients pushed during backward
// (tessel.torch's clip_grad_norm_ with overlap, and fsdp). Pure bookkeeping:
// the ShardJob asks it what to do with each event and does it.
//
// Protocol (core/wire.h; docs/wire-protocol.md "Held steps"):
//   PUSH with kFrameHoldUpdate: the step's first push (or part) decides
//     whether the step is held; every later one must say the same
//     (FAILED_PRECONDITION otherwise: ranks that disagree).
//   A complete bucket of a held step is reduced into a buffer, its share of
//     the norm measured (core/grad_norm.h), and left unapplied (kReduce);
//     once every bucket is, NORM_ASKs are answered with the shard's stats,
//     summed in bucket order (the same bits whatever order the buckets came).
//   RELEASE(multiplier) of the step: its gradient multiplier (replacing the
//     settings' grad_scale; 0 bits: the settings' own) is fixed by the first
//     one; the reduced buckets are applied (kApply), and the buckets still to
//     come are updated at once when complete (kUpdate with the multiplier).
//     Every rank sends one; a later one must carry the same bits (else
//     FAILED_PRECONDITION, counted: the step is applied with the first).
//     A RELEASE may come before the step's pushes (the transport does not
//     order small and large frames): it is kept for the step.
//   Not held: every complete bucket is updated at once (kUpdate), as always.
//   The step ends (EndStep) when its last bucket is applied; a RELEASE of the
//     step just ended with the same bits is accepted, and a NORM_ASK of it
//     is answered with its norm (a slower rank's: the first RELEASE applied
//     the step before the others asked).
//
// Contract: refusals change nothing. A NORM_ASK of a step before or after
// the one in progress, of a step not held, or of one released before all
// its buckets were measured, is refused (FAILED_PRECONDITION naming why).
//
// Threads: none of its own; the owner calls under its lock.
//
// Example:
//   StepHold hold(/*num_buckets=*/2);
//   hold.OnPush(5, /*held=*/true);                 // step 5 holds
//   hold.Begin(0) == StepHold::Action::kReduce;    // reduce bucket 0, keep it
//   hold.Reduced(0, stats0);  hold.Begin(1);  hold.Reduced(1, stats1);
//   hold.AskNorm(5) -> the stats of both          // answered to each rank
//   hold.Release(5, bits) -> {0, 1}               // apply both
#ifndef TESSEL_SERVER_STEP_HOLD_H_
#define TESSEL_SERVER_STEP_HOLD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/grad_norm.h"

namespace tessel {

class StepHold {
 public:
  StepHold(std::string where, int num_buckets);

  // The step in progress (the job's version); its state starts empty.
  int64_t step() const { return step_; }
  // A PUSH (or part) of the step in progress; `held`: it carries
  // kFrameHoldUpdate. On error nothing changes.
  absl::Status OnPush(bool held);
  // Whether the step in progress is held (a push said so).
  bool held() const { return decided_ && held_; }
  // Whether a push of the step in progress said whether it is held.
  bool decided() const { return decided_; }

  enum class Action {
    kUpdate,  // reduce and update now (grad multiplier: multiplier(), if set)
    kReduce,  // reduce into the held buffer, measure, do not apply
    kApply,   // apply the held buffer (a RELEASE came after its reduction)
  };
  // A complete bucket's turn (Update), or one Release handed back.
  Action Begin(int bucket);
  // kReduce done: the bucket's stats. Returns whether the bucket is to be
  // applied now (a RELEASE came meanwhile) and sets *all_measured when this
  // was the step's last bucket to measure (answer the NORM_ASKs waiting).
  bool Reduced(int bucket, const GradNormStats& stats, bool* all_measured);
  // The multiplier of the step's update: its float bits; 0 = the settings'.
  std::optional<uint32_t> multiplier() const { return multiplier_; }

  // NORM_ASK of `step`: the stats now, nullopt to wait (until Reduced says
  // all are measured), or a refusal.
  absl::StatusOr<std::optional<GradNormStats>> AskNorm(int64_t step) const;
  // RELEASE of `step` with `bits`: the buckets to apply now (reduced and
  // waiting), or a refusal.
  absl::StatusOr<std::vector<int>> Release(int64_t step, uint32_t bits);

  // The step's last bucket was applied: the next step starts empty.
  void EndStep();
  // The job starts over at `step` (a restore, a write of its state).
  void Reset(int64_t step);

  // For a stall report: "" unless the held step waits for its RELEASE.
  std::string Waiting() const;

 private:
  enum class Bucket : uint8_t { kPending, kReducing, kReduced, kApplying };
  GradNormStats TotalLocked() const;

  const std::string where_;
  const int num_buckets_;
  int64_t step_ = 0;
  bool decided_ = false;
  bool held_ = false;
  std::optional<uint32_t> multiplier_;
  std::vector<Bucket> buckets_;
  std::vector<GradNormStats> stats_;
  int measured_ = 0;
  // The step just ended, its multiplier and norm: a slower rank's RELEASE
  // or NORM_ASK of it (another rank's RELEASE applied it).
  int64_t last_step_ = -1;
  std::optional<uint32_t> last_multiplier_;
  std::optional<GradNormStats> last_stats_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_STEP_HOLD_H_
