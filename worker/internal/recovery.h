// RecoveryCoordinator: brings a job whose worker or shard server was lost
// back to a consistent step (docs/architecture.md, "Recovery").
//
// Protocol: every worker that sees a member missing stops its step with a
// recoverable status; Run() waits until all ranks and shards are present
// again (or, elastic, enough survivors), reconnects restarted servers, and
// then the first of the workers that go on replaces the job on every shard
// with the latest complete checkpoint at a fresh epoch above every epoch in
// use, while the others poll the shards until they all report that restore.
// Everyone then pulls the checkpoint's parameters (fsdp: waits for the step
// on every shard). DDP, whose state lives on the workers, re-creates the
// servers empty and aligns the ranks on the most advanced one's state.
// Frames of the old epoch are refused by servers and dropped by workers, so
// nothing from before the rollback is applied.
//
// Depends on (never the reverse): Membership, DataChannel, BucketExchange,
// FsdpUnits, DdpState, JobCollectives, JobControl.
//
// Threads: the driving thread.
//
// Example: a step failed with a status IsRecoverable says is:
//   RecoveryCoordinator recovery(RecoveryParts{&ctx, &channel, &membership, &exchange,
//                                              &units, &ddp, &collectives, &control, &spec});
//   TESSEL_RETURN_IF_ERROR(recovery.Run(/*restore_step=*/-1));  // latest checkpoint
//   // ctx.step is the restored step; the buffers hold its parameters
#ifndef TESSEL_WORKER_INTERNAL_RECOVERY_H_
#define TESSEL_WORKER_INTERNAL_RECOVERY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/shard.pb.h"
#include "transport/payload_vector.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/ddp_state.h"
#include "worker/internal/fsdp_units.h"
#include "worker/internal/job_collectives.h"
#include "worker/internal/job_context.h"
#include "worker/internal/job_control.h"
#include "worker/internal/membership.h"

namespace tessel::internal {

// What the shards' stats say about a restore (AwaitRestore, StillRestored):
// ready when every shard holds the same restore, at an epoch above
// `after_epoch` and still at the step it was restored to (no step can pass
// without every worker); then its epoch, step and the workers (registry
// ranks) it was made for. Otherwise `last` says what was seen instead.
struct RestoreSeen {
  bool ready = false;
  int64_t epoch = -1;
  int64_t step = -1;
  std::vector<int> ids;
  std::string last;
};
RestoreSeen ReadRestore(const std::vector<v1::ShardStats>& stats, int64_t after_epoch);

// AlignDdpState's choice from every rank's (step + 1, digest) words (0: the
// rank holds no state): the donor is the lowest rank at the highest step
// (-1: nobody holds state) and `step` its step; `behind` names each rank
// that differs from it and how.
struct DdpAlignment {
  int donor = -1;
  int64_t step = -1;
  std::vector<std::string> behind;
};
DdpAlignment PlanDdpAlignment(absl::Span<const uint64_t> words, int world);

struct RecoveryParts {
  JobContext* ctx;
  DataChannel* channel;
  Membership* membership;
  BucketExchange* exchange;
  FsdpUnits* units;
  DdpState* ddp;
  JobCollectives* collectives;
  const JobControl* control;
  v1::JobSpec* spec;  // as registered; world_size follows an elastic recovery
};

class RecoveryCoordinator {
 public:
  explicit RecoveryCoordinator(const RecoveryParts& parts) : p_(parts) {}

  // Rolls back to the checkpoint of `restore_step` (-1: the latest complete
  // one), retrying until recovery_timeout. On success ctx.step is the
  // restored step and the buffers hold its parameters.
  // `restore_if_nobody_does`: for a job whose workers may be waiting in
  // place (rejoin.h) rather than restoring: if no restore shows up within
  // a moment, this worker restores the shards itself, whatever its rank
  // (the waiting workers' pulls are then refused and they take it).
  absl::Status Run(int64_t restore_step, bool restore_if_nobody_does = false);
  // A newcomer (elastic growth): waits until the job's workers restore the
  // shards for a world that includes it, then takes its rank and the
  // restored step's parameters (DDP: the workers' state).
  absl::Status Admit();
  // A replacement of a lost worker (rejoin.h): true once it has rejoined the
  // step in flight without rollback (ctx.step is the step the shards
  // applied last, the buffers hold its parameters, and the buckets its rank
  // had pushed of the next step are marked pushed); false where the job does
  // not rejoin in place (Run() rolls back instead). A failure is
  // recoverable: Run() then joins the rollback.
  absl::StatusOr<bool> RejoinInPlace();
  int recoveries() const { return recoveries_; }
  int in_place_rejoins() const { return in_place_rejoins_; }
  // The step the last in-place rejoin took (-1: none): a worker that fails
  // again before finishing the step after it joins a rollback instead, so a
  // step that cannot complete in place (say, the survivors hold it for
  // clipping and the replacement does not) is not rejoined forever.
  int64_t last_in_place_step() const { return last_in_place_step_; }
  // Whether the step the last in-place rejoin recomputes holds its update
  // (the others pushed it held for clipping): it is pushed held too.
  bool rejoined_held() const { return rejoined_held_; }

 private:
  absl::Status Once(absl::Time deadline, absl::Time elastic_at, int64_t restore_step,
                    int64_t after_epoch, bool restore_if_nobody_does);
  void Reset();
  void SettleReceives(absl::Duration limit);
  absl::Status RestoreShards(absl::Time deadline, int64_t restore_step, const std::vector<int>& ids,
                             int64_t* epoch, int64_t* step);
  // ids: the workers that restore recorded, in data-parallel rank order.
  // A newcomer waits on past restores that do not include it.
  absl::Status AwaitRestore(absl::Time deadline, int64_t after_epoch, int64_t* epoch, int64_t* step,
                            std::vector<int>* ids);
  // After the restore: the new epoch, the workers that go on, their step's
  // parameters (DDP: aligned state).
  absl::Status TakeRestore(int64_t epoch, int64_t step, const std::vector<int>& ids);
  // DDP, after a restore: the ranks compare (step, state digest); if any
  // differs or holds no state (a replacement), every rank takes the state of
  // the lowest rank at the highest step, and the servers (re-created at
  // `server_step`) move to that step. Exact: each rank applied the same
  // averaged gradients, so a rank one step ahead is that rank's future.
  absl::Status AlignDdpState(int64_t server_step);
  // A restore this worker made in the current Run(), and whether every shard
  // still holds it untouched (same epoch and workers, no step since).
  struct OwnRestore {
    int64_t epoch = -1;
    int64_t step = -1;
    std::vector<int> ids;
  };
  bool StillRestored(const OwnRestore& r);

  RecoveryParts p_;
  // An attempt that restored the shards but then failed on its own (its
  // pull met a stale endpoint) takes the same restore again: the other
  // workers may already have taken it, and a newer one would strand them.
  std::optional<OwnRestore> own_restore_;
  int recoveries_ = 0;
  int in_place_rejoins_ = 0;
  int64_t last_in_place_step_ = -1;
  bool rejoined_held_ = false;
  // Buffers a transfer from before a rollback may still write into: kept
  // until the transport is shut down (driving thread).
  std::vector<std::vector<float>> retired_;
  std::vector<std::vector<uint16_t>> retired_half_;
  std::vector<PayloadVector<float>> retired_payload_;  // the exchange's buffers
  std::vector<PayloadVector<uint16_t>> retired_payload_half_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_RECOVERY_H_
