// JobControl: the control-plane calls that act on one job on every shard
// server of a worker's fleet (create or restore it, set its optimizer, skip
// tensors, ask for a checkpoint, delete it, read its statistics and its
// checkpoints), each fan-out written once, here.
//
// Contract:
//   - Shards are called in ascending order: those the fleet knows when the
//     call starts, below `num_shards` where one is given (a helper job on
//     shard 0 only).
//   - Setting up and reading (CreateJob, Stats, MaxEpoch) stop at the first
//     failure and return it: the shards after it are not called.
//   - Changing a running job (SetOptimizer, SkipTensors, SaveCheckpoint,
//     DeleteJob) calls every shard concerned whatever fails and returns the
//     first failure; the shards that took the change keep it, and the caller
//     retries with the same values (which the shards accept again) or stops.
//   - A failure keeps the gRPC code and reads "<ctx.Where()>: <call> on
//     shard S (address): <message>". Nothing is tagged recoverable: whether a
//     failure is one a recovery repairs is the caller's decision
//     (JobContext::Recoverable).
//   - A shard without elements (core/layout.h, Layout::shard_empty) takes
//     no part in the job's steps: the step-bound calls (SetOptimizer,
//     SkipTensors, SaveCheckpoint) leave it out, and CreateJob's `check`
//     (which compares steps) does not see it. Shard 0 always holds
//     elements, so FirstShardStats and UnderWay read the job's step.
//   - Requests name the job of the context; steps and epochs are the
//     caller's, as is the JobSpec (nothing is read from the context but the
//     job name, Where() and, for CreateJob and SkipTensors, the layout).
//
// Threads: the driving thread (a ShardFleet is not thread-safe). The
// context and the fleet are not owned and outlive the JobControl; the fleet
// may be re-pointed (Membership reconnects a restarted server) in between.
//
// Example:
//   JobControl control(&ctx, &membership.fleet());
//   v1::CreateJobRequest create;
//   *create.mutable_spec() = spec;
//   create.set_epoch(ctx.epoch);
//   TESSEL_RETURN_IF_ERROR(control.CreateJob(create, "CreateJob", nullptr));
//   TESSEL_RETURN_IF_ERROR(control.SaveCheckpoint(ctx.step + 1));
#ifndef TESSEL_WORKER_INTERNAL_JOB_CONTROL_H_
#define TESSEL_WORKER_INTERNAL_JOB_CONTROL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/optimizer.h"
#include "proto/shard.pb.h"
#include "rpc/shard_fleet.h"
#include "runtime/rank_keys.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class JobControl {
 public:
  // num_shards < 0: every shard of the fleet.
  JobControl(const JobContext* ctx, const ShardFleet* fleet, int num_shards = -1)
      : ctx_(ctx), fleet_(fleet), num_shards_(num_shards) {}

  // After a CreateJob succeeded on `shard` (and its range matched):
  // OK to go on, or the error that ends the fan-out.
  using CreateCheck = std::function<absl::Status(int shard, const v1::CreateJobResponse& response)>;
  // CreateJob on every shard: `request` as given with shard_index set per
  // shard (a restore reads the checkpoint: up to 5 minutes a shard). Each
  // response's range must be the one ctx.layout derives for that shard
  // (else Internal), then `check` (if any) sees it, where the shard holds
  // elements. On failure `*refused`
  // (if given) says whether a response was refused (range or `check`)
  // rather than a call failing.
  absl::Status CreateJob(const v1::CreateJobRequest& request, absl::string_view what,
                         const CreateCheck& check, bool* refused = nullptr) const;
  // This rank's data-path frame keys of the current epoch from every shard
  // (GetFrameKey with ctx.rank, ctx.epoch, ctx.frame_key_claim and
  // ctx.member_epoch; empty
  // where the server does not authenticate frames), in shard order.
  absl::StatusOr<std::vector<FrameKeyGrant>> FrameKeys() const;

  // New optimizer hyper-parameters from `step` on, on every shard.
  absl::Status SetOptimizer(const OptimizerParams& optimizer, int64_t step) const;
  // Tensors (indices into the layout) `step` leaves alone, on the shards
  // holding one of them only: another may complete the step first.
  absl::Status SkipTensors(absl::Span<const int32_t> tensors, int64_t step) const;
  // Every shard snapshots the job when it completes `step`.
  absl::Status SaveCheckpoint(int64_t step) const;
  // Best effort, 5 s a shard: failures other than NotFound are logged.
  void DeleteJob() const;

  // Every shard's statistics, in shard order (zero timeout: the fleet's).
  absl::StatusOr<std::vector<v1::ShardStats>> Stats(
      absl::Duration timeout = absl::ZeroDuration()) const;
  // The highest epoch a shard holds the job at; shards without the job
  // (NotFound) count as -1.
  absl::StatusOr<int64_t> MaxEpoch() const;
  // Shard 0's statistics.
  absl::StatusOr<v1::ShardStats> FirstShardStats() const;
  // Steps of the job's complete checkpoints (shard 0's manifest list),
  // ascending; none (empty) where shard 0 does not know the job.
  absl::StatusOr<std::vector<int64_t>> CheckpointSteps() const;
  // The checkpoint of `step` (-1: the latest complete one), from shard 0;
  // NotFound where there is none.
  absl::StatusOr<v1::CheckpointInfo> GetCheckpoint(int64_t step, absl::string_view what) const;
  // Whether the job is under way: past step 0 on shard 0 or, `checkpoints`
  // being written for it, with a complete checkpoint (WorkerOptions::
  // auto_resume).
  absl::StatusOr<bool> UnderWay(bool checkpoints) const;

 private:
  using PerShard = std::function<absl::Status(int shard)>;
  // Every shard in order; the first failure ends it.
  absl::Status ForEach(const PerShard& call) const;
  // Every shard whatever fails; the first failure.
  absl::Status ForAll(const PerShard& call) const;
  std::vector<int> Shards() const;
  // Whether `shard` takes part in the job's steps: it holds elements of the
  // layout (true before there is one).
  bool InStep(int shard) const;
  std::string What(absl::string_view call) const;
  v1::JobRef Ref() const;

  const JobContext* const ctx_;
  const ShardFleet* const fleet_;
  const int num_shards_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_JOB_CONTROL_H_
