// JobTable: the shard server's jobs, and the rules that create, replace,
// find and delete them. CreateJob validates a request and is idempotent (a
// repeat with the same spec answers as the first did, moving the epoch
// forward); a restore loads a checkpoint; ReplaceJob is recovery (the job
// starts again from a checkpoint, or DDP empty at the workers' step, at a
// newer epoch, refusing a stale recovery); SaveCheckpoint asks a job's shard
// for a snapshot. Transport-free: the ShardService drives it from gRPC, the
// DataPlane looks jobs up in it to route frames (FindById).
//
// Threads: any; the table is under mu_, and each ShardJob guards itself.
// Jobs are shared: one deleted or replaced here lives on for the frames and
// RPCs that still hold it.
//
// Example:
//   JobTable jobs(&checkpointer);
//   auto created = jobs.CreateJob(request);
//   std::shared_ptr<ShardJob> job = jobs.FindJob("demo");
#ifndef TESSEL_SERVER_JOB_TABLE_H_
#define TESSEL_SERVER_JOB_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/shard.pb.h"
#include "server/checkpointer.h"
#include "server/shard_job.h"

namespace tessel {

class JobTable {
 public:
  // `checkpointer` (not owned) restores and receives snapshots; may be a
  // disabled one.
  // `memory` (may be null): the data transport's payload memory, where jobs
  // keep the parameters they serve.
  // `fold_prefix`: jobs sum the ranks that landed in rank order before a
  // bucket is complete (ShardJob::set_fold_prefix); off only to measure it.
  explicit JobTable(Checkpointer* checkpointer, std::shared_ptr<PayloadMemory> memory = nullptr,
                    bool fold_prefix = true);

  // `creator`: the caller's identity (rpc/caller.h Caller::Identity), which
  // a job this creates records (ShardJob::creator) unless it is restored
  // from a checkpoint that records one: a restore keeps the checkpoint's
  // creator, whoever restores it. A job already here keeps its own.
  absl::StatusOr<v1::CreateJobResponse> CreateJob(const v1::CreateJobRequest& req,
                                                  const std::string& creator = "");
  // CreateJob with `replace` (recovery): the job starts again from a
  // checkpoint (or, DDP, empty at start_step) at a newer epoch, whatever this
  // server held; see CreateJobRequest.replace. The creator: the
  // checkpoint's, else the replaced job's, else `creator`.
  absl::StatusOr<v1::CreateJobResponse> ReplaceJob(const v1::CreateJobRequest& req,
                                                   const std::string& creator = "");
  // Asks the job's shard to snapshot at `step` (see ShardJob::RequestCheckpoint).
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(const v1::SaveCheckpointRequest& req);
  absl::Status DeleteJob(const std::string& job);
  // nullptr if there is no job of that name.
  std::shared_ptr<ShardJob> FindJob(const std::string& job);
  // The job a frame's job_id names (JobId of its name), nullptr if none.
  std::shared_ptr<ShardJob> FindById(uint64_t job_id);
  std::vector<std::shared_ptr<ShardJob>> Jobs();
  Checkpointer* checkpointer() { return checkpointer_; }
  // Called (outside the table's lock) after ReplaceJob put a new job in the
  // place of `old`, with the pulls `old` still owed: workers of the old
  // epoch waiting for a step that will never come. The data plane answers
  // them with an ERROR of their epoch, which their step reports as
  // recoverable at once, instead of after the step timeout. nullptr removes.
  using ReplacedListener =
      std::function<void(ShardJob& old, const std::vector<ShardJob::Puller>& waiting)>;
  void SetReplacedListener(ReplacedListener listener);

 private:
  Checkpointer* const checkpointer_;
  const std::shared_ptr<PayloadMemory> memory_;
  const bool fold_prefix_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShardJob>> jobs_ ABSL_GUARDED_BY(mu_);
  absl::Mutex listener_mu_;
  ReplacedListener replaced_ ABSL_GUARDED_BY(listener_mu_);
};

}  // namespace tessel

#endif  // TESSEL_SERVER_JOB_TABLE_H_
