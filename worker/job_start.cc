#include "worker/job_start.h"

#include "absl/strings/str_cat.h"

namespace tessel {

absl::Status CheckJobStart(const JobStart& start) {
  if (start.ddp && start.resume && !start.recovery) {
    return absl::FailedPreconditionError(absl::StrCat(
        start.where,
        ": DDP keeps parameters and optimizer state on the workers and writes no checkpoint, so "
        "there is nothing to resume from on the servers. A replacement for a lost worker takes "
        "the state of the surviving workers: run it with recovery on (--recover, "
        "WorkerOptions.recovery) as well as --resume"));
  }
  const bool seeds = !start.resume && (start.rank == 0 || start.ddp);
  if (seeds && start.init_floats != start.num_params) {
    return absl::InvalidArgumentError(absl::StrCat(start.where, ": init has ", start.init_floats,
                                                   " floats but the layout has ",
                                                   start.num_params));
  }
  return absl::OkStatus();
}

absl::Status CheckCreatedShard(const std::string& where, bool resume, bool ddp, int shard,
                               int64_t step, int64_t* job_step) {
  if (resume) {
    if (shard == 0) *job_step = step;
    if (step != *job_step) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": shards resumed at different steps (shard 0 at ", *job_step,
                       ", shard ", shard, " at ", step, "); restart the servers and resume again"));
    }
  } else if (step != 0 && !ddp) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": job already exists at step ", step, " on shard ", shard,
                     "; resume it (WorkerOptions.resume / --resume) or use a new job name"));
  }
  return absl::OkStatus();
}

}  // namespace tessel
