// What the worker SDK reports: the outcome of SynchronizeOptimizerState, the
// worker's memory, and each shard server's view of the job. Plain C++ types
// (no protocol headers), part of the SDK's public surface.
#ifndef TESSEL_WORKER_REPORTS_H_
#define TESSEL_WORKER_REPORTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout.h"

namespace tessel {

// What SynchronizeOptimizerState found.
struct OptimizerStateReport {
  int64_t step = 0;
  // DDP: one digest of (step, params, optimizer state) per rank, as found
  // before any repair. ZeRO/FSDP: one state digest per shard.
  std::vector<std::string> digests;
  bool consistent = true;           // all ranks equal (DDP), all shards at step (ZeRO)
  std::vector<int> repaired_ranks;  // DDP: ranks overwritten with rank 0's state
};

// Where this worker's last Step() spent its time: handing the buckets not
// yet pushed to the transport (push: sends are asynchronous, so their bytes
// mostly move during the next phase), waiting for the first updated bucket
// to come back (wait: this and the other ranks' pushes landing, the servers'
// reduction and update), and receiving the rest (pull: the last bucket's
// arrival minus the first's). All zero before the first step and for fsdp, whose steps go
// unit by unit. compute: from the end of the previous Step() to the start of
// this one, the caller's own time (forward and backward, data loading; 0 on
// the first step): with the servers' arrival times it tells "computing" from
// "slow link" (docs/observability.md, "Stragglers"). Each step's phases go to
// the registry with the worker's heartbeats (HeartbeatRequest.phases).
// update: ddp's optimizer update on this worker after the pull (0 for the
// other strategies: their servers update, inside wait).
struct StepPhases {
  int64_t compute_ns = 0;
  int64_t push_ns = 0;
  int64_t wait_ns = 0;
  int64_t pull_ns = 0;
  int64_t update_ns = 0;
};

// A rank the job's shard servers name a straggler now (docs/observability.md,
// "Stragglers"), as the registry's last heartbeat answer said: rank is the
// data-parallel rank; score its median step time over the median rank's
// (1.0 = the median's pace); lateness its median last push after the first
// rank's; shard the server naming it (the highest score when several do);
// host and pid its process ("" and 0 when the registry no longer lists it).
struct StragglerReport {
  int rank = 0;
  int registry_rank = 0;
  double score = 0;
  double lateness_seconds = 0;
  int shard = 0;
  int64_t since_unix_ms = 0;
  std::string host;
  int64_t pid = 0;
};

struct WorkerMemory {
  int64_t params_bytes = 0;
  int64_t grads_bytes = 0;
  int64_t optimizer_bytes = 0;   // DDP only: optimizer state lives on the worker
  int64_t peak_bytes = 0;        // fsdp: most parameter + gradient bytes held at once
  int64_t peak_grads_bytes = 0;  // most gradient bytes held at once (fsdp: unit buffers;
                                 // otherwise the gradient buffer, grads_bytes)
};

// One shard server's view of the job (control plane), for tools and tests.
struct ShardReport {
  int shard = 0;
  Range range;
  int64_t epoch = 0;
  int64_t step = 0;  // updates applied
  bool initialized = false;
  bool step_in_progress = false;  // some gradients of the next step have arrived
  std::string state_digest;       // hex digest of params + optimizer state + step
  int64_t params_bytes = 0;       // fp32 masters held
  int64_t optimizer_bytes = 0;
  int64_t grad_buffer_bytes = 0;
  int64_t rejected_frames = 0;
  int64_t stale_epoch_frames = 0;
  int64_t applied_steps = 0;
  int recoveries = 0;
  int64_t update_us = 0;     // reducing and updating buckets, over the job's life there
  int64_t pushed_bytes = 0;  // gradient payload bytes received (top-k: the pairs)
  // Pushes summed in rank order before their bucket was complete (prefix
  // order, three or more workers), over the job's life there.
  int64_t folded_pushes = 0;
  // CPU time of the whole server process (all threads and jobs) since it
  // started, when asked: a difference of two reports is what it spent.
  int64_t process_cpu_us = 0;
};

}  // namespace tessel

#endif  // TESSEL_WORKER_REPORTS_H_
