// Job start rules: what a worker checks before RegisterLayout starts or
// resumes its job, and what it accepts of the shard servers' answers to
// CreateJob. Worker::RegisterLayout and Worker::CreateJob apply them; the
// rules and their messages live here, once.
//
// Contract:
//   CheckJobStart(start)   before anything is sent. FailedPrecondition for a
//                          DDP job resumed without recovery (DDP writes no
//                          server checkpoint; a replacement takes the other
//                          workers' state through a recovery);
//                          InvalidArgument when a rank that seeds a fresh
//                          start (rank 0, every rank under DDP) passes an
//                          `init` of another size than the layout's.
//   CheckCreatedShard(...) one shard's CreateJob answer (the step it is at).
//                          Resuming: shard 0's step becomes the job's
//                          (*job_step) and every other shard must be at it.
//                          Starting afresh: a ZeRO/FSDP shard must be at step
//                          0 (else the job exists: resume it or rename it).
//                          FailedPrecondition otherwise, *job_step unchanged.
//
// Pure: no I/O, no threads.
//
// Example:
//   TESSEL_RETURN_IF_ERROR(CheckJobStart({ctx.Where(), ddp, resume, recovery,
//                                         rank, init.size(), n}));
//   ... CheckCreatedShard(ctx.Where(), ctx.resume, ddp, shard, resp.step(), &ctx.step)
#ifndef TESSEL_WORKER_JOB_START_H_
#define TESSEL_WORKER_JOB_START_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tessel {

struct JobStart {
  std::string where;  // "job 'J' rank r", the start of every message
  bool ddp = false;
  bool resume = false;    // resuming (--resume, auto-resume or a newcomer)
  bool recovery = false;  // WorkerOptions.recovery / --recover
  int rank = 0;
  size_t init_floats = 0;  // the size of RegisterLayout's `init`
  size_t num_params = 0;   // the layout's
};

absl::Status CheckJobStart(const JobStart& start);

absl::Status CheckCreatedShard(const std::string& where, bool resume, bool ddp, int shard,
                               int64_t step, int64_t* job_step);

}  // namespace tessel

#endif  // TESSEL_WORKER_JOB_START_H_
