// The one place flags turn into WorkerOptions, for every binary that runs a
// worker (tessel-train, tessel-hybrid-train, benchmarks, a user's own
// program). This file defines a worker process's flags (registry, pool,
// timeouts, checkpoints, recovery, elastic policy, admin token); the training
// flags it also reads (strategy, optimizer, precision, bucket size, UCX) are
// worker/train_flags.h's, and TLS is rpc/tls_flags.h's --tls_*.
//
// Identity stays with the binary (its --job, --rank, --world, --servers
// defaults differ): the caller sets job, rank, world_size, num_servers and,
// for per-unit strategies, fsdp_units.
//
// Example:
//   absl::ParseCommandLine(argc, argv);
//   TESSEL_ASSIGN_OR_RETURN(WorkerOptions o, WorkerOptionsFromFlags());
//   o.job = absl::GetFlag(FLAGS_job);
//   o.rank = absl::GetFlag(FLAGS_rank);
//   o.world_size = absl::GetFlag(FLAGS_world);
#ifndef TESSEL_WORKER_WORKER_FLAGS_H_
#define TESSEL_WORKER_WORKER_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "worker/options.h"

ABSL_DECLARE_FLAG(std::string, registry);
ABSL_DECLARE_FLAG(std::string, pool);
ABSL_DECLARE_FLAG(int, step_timeout_s);
ABSL_DECLARE_FLAG(int, connect_timeout_s);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every_steps);
ABSL_DECLARE_FLAG(int, checkpoint_every_s);
ABSL_DECLARE_FLAG(int, checkpoint_report_s);
ABSL_DECLARE_FLAG(bool, checkpoint_initial);
ABSL_DECLARE_FLAG(int, keep_checkpoints);
ABSL_DECLARE_FLAG(bool, recover);
ABSL_DECLARE_FLAG(bool, resume);
ABSL_DECLARE_FLAG(int64_t, resume_step);
ABSL_DECLARE_FLAG(int, recovery_timeout_s);
ABSL_DECLARE_FLAG(int, lease_ttl_ms);
ABSL_DECLARE_FLAG(int, elastic_min_workers);
ABSL_DECLARE_FLAG(double, elastic_grace_s);
ABSL_DECLARE_FLAG(int, elastic_max_workers);
ABSL_DECLARE_FLAG(std::string, token_file);

namespace tessel {

// Every WorkerOptions field a flag sets, validated (a bad value's error names
// its flag); job, rank, world_size, num_servers and fsdp_units are the
// caller's. --shuffle_seed is offset by the rank later: see ShuffleSeedFor.
absl::StatusOr<WorkerOptions> WorkerOptionsFromFlags();
// --shuffle_seed for `rank` (0 stays 0 = off): each rank its own order.
uint64_t ShuffleSeedFor(int rank);

}  // namespace tessel

#endif  // TESSEL_WORKER_WORKER_FLAGS_H_
