// JobContext: who this worker is in its job, read by every collaborator of
// the Worker (worker/internal/*): options, registry identity, the fencing
// epoch stamped on frames, the step, the layout once registered.
//
// Contract: Where() names the job, rank (and registry rank once they
// differ) and step, the prefix of every message; Recoverable(s) tags s
// (IsRecoverable) when recovery is on and its code is one a rollback
// repairs (FailedPrecondition, NotFound, Aborted, Unavailable, Cancelled).
//
// Threads: the driving thread writes everything; the transport's progress
// thread reads `epoch` and `rank` (atomics: a recovery moves to a new epoch,
// an elastic one renumbers ranks) for frames and messages. Collaborators keep
// a pointer; the Worker owns the context.
//
// Example:
//   JobContext ctx(options);
//   ctx.step = 7;  // ctx.Where() == "job 'mlp' rank 0 step 7"
//   absl::Status s = ctx.Recoverable(absl::UnavailableError("server gone"));
//   // IsRecoverable(s) with options.recovery; Untagged(s) drops the tag
#ifndef TESSEL_WORKER_INTERNAL_JOB_CONTEXT_H_
#define TESSEL_WORKER_INTERNAL_JOB_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/layout.h"
#include "core/precision.h"
#include "runtime/timeline.h"
#include "worker/options.h"

namespace tessel::internal {

struct JobContext {
  explicit JobContext(const WorkerOptions& o);

  // "job 'J' rank R (registry rank I) step S": the prefix of every message.
  std::string Where() const;
  // The same without the step, for the transport's thread (the step belongs
  // to the driving thread): frame handlers and their callbacks.
  std::string WhereAnyThread() const;
  bool ddp() const { return options.strategy == Strategy::kDdp; }
  bool fsdp() const { return options.strategy == Strategy::kFsdp; }
  bool elastic() const { return options.elastic_min_workers > 0; }
  // zero2 with units: gradients live per unit (UnitGrads/PushUnit), freed
  // once pushed, instead of in a full-model buffer.
  bool unit_grads() const {
    return fsdp() || (options.strategy == Strategy::kZero2 && !options.fsdp_units.empty());
  }
  // `s` tagged recoverable (Worker::IsRecoverable) when recovery is on and
  // its code is one a rollback repairs: a stale epoch or step, a job the
  // (restarted) server does not have yet, a lost peer. Others pass as is.
  absl::Status Recoverable(absl::Status s) const;

  // As given to Connect, changed afterwards only by the caller
  // (Worker::SetOptimizer, SetResumeStep), never by the worker itself: what
  // it decides lives in the members below (Worker::options()'s contract).
  WorkerOptions options;
  // This worker's data-parallel rank and the job's world size:
  // options.rank and options.world_size at Connect; a newcomer (elastic
  // growth) and an elastic recovery change them (Membership).
  std::atomic<int> rank{0};
  int world_size = 1;
  const int id;  // registry rank (options.rank at Connect), never changes
  // RegisterLayout takes the job's state from the servers (a checkpoint or
  // a recovery) instead of `init`: options.resume, or decided at
  // RegisterLayout (options.auto_resume, or a newcomer).
  bool resume = false;
  const uint64_t job_id;
  std::string token;  // admin token (options.token or $TESSEL_TOKEN)
  // The job's fencing epoch, stamped on every frame: the registry epoch at
  // the start, a newer one after each recovery.
  std::atomic<int64_t> epoch{0};
  int64_t step = 0;
  // PUSH frames carry kFrameHoldUpdate: each step's update waits for the
  // worker's RELEASE (clipping by the job-wide norm; Worker::HoldUpdates).
  std::atomic<bool> hold_update{false};
  std::unique_ptr<Layout> layout;  // set by RegisterLayout
  Timeline* timeline = nullptr;    // WorkerOptions.timeline; not owned
  std::optional<HalfType> half;    // mixed precision
  // Hierarchical aggregation (Membership::PlanAggregation): each rank's host
  // group as put in the JobSpec (empty = flat), and why (Worker::aggregation()).
  std::vector<int> rank_groups;
  std::string aggregation = "flat";
  // This process's claim on its rank's frame keys (GetFrameKey): random,
  // made once per process, so a retried or repeated request of this process
  // is recognised and another process's for the same (rank, epoch) is not.
  const std::string frame_key_claim;
  // The joined_epoch the registry gave this process's membership at its
  // last join (RegistryClient::joined_epoch; set by Membership; 0 before
  // one), sent with GetFrameKey: a replacement of a dead worker is handed
  // that rank's keys at the same epoch (server/frame_keys.h).
  std::atomic<int64_t> member_epoch{0};
};

// The payload a status carries when Worker::IsRecoverable holds.
absl::Status MarkRecoverable(absl::Status status);
bool IsRecoverable(const absl::Status& status);
// The same status without the recoverable tag.
absl::Status Untagged(const absl::Status& status);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_JOB_CONTEXT_H_
