// WorkerParts: the collaborators behind the Worker facade (worker/worker.h),
// made and wired in one place. Dependencies run one way:
//   RecoveryCoordinator, StateQueries -> Membership, JobControl,
//   JobCollectives (-> ServerReducer), BucketExchange, FsdpUnits, DdpState
//   -> DataChannel -> Transport; all read JobContext.
//
// Contract:
//   - Build() makes every part from ctx.options: the control-plane
//     credentials, the metrics endpoint and timeline the options ask for,
//     the transport, and the collaborators over them (nothing is contacted
//     yet: Membership::Join is the Worker's next call). A failure names the
//     worker (ctx.Where()) and leaves the parts unusable.
//   - The destructor leaves the registry and shuts the transport down before
//     anything is freed, so no frame lands in a freed buffer; recovery (its
//     retired buffers) is freed after the transport stopped.
//
// Threads: the driving thread; the parts' own rules are in their headers.
//
// Example:
//   auto parts = std::make_unique<WorkerParts>(options);
//   TESSEL_RETURN_IF_ERROR(parts->Build());
//   TESSEL_RETURN_IF_ERROR(parts->membership->Join());
#ifndef TESSEL_WORKER_INTERNAL_WORKER_PARTS_H_
#define TESSEL_WORKER_INTERNAL_WORKER_PARTS_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/shard.pb.h"
#include "rpc/metrics_server.h"
#include "runtime/timeline.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/ddp_state.h"
#include "worker/internal/fsdp_units.h"
#include "worker/internal/job_collectives.h"
#include "worker/internal/job_context.h"
#include "worker/internal/job_control.h"
#include "worker/internal/membership.h"
#include "worker/internal/recovery.h"
#include "worker/internal/state_queries.h"
#include "worker/internal/worker_metrics.h"
#include "worker/options.h"

namespace tessel::internal {

struct WorkerParts {
  explicit WorkerParts(const WorkerOptions& options) : ctx(options), ddp(options.optimizer) {}
  ~WorkerParts();
  WorkerParts(const WorkerParts&) = delete;
  WorkerParts& operator=(const WorkerParts&) = delete;

  absl::Status Build();

  // Declared in dependency order: destruction frees recovery's retired
  // buffers after the destructor has shut the transport down.
  JobContext ctx;
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<JobControl> control;  // over membership's fleet
  std::unique_ptr<BucketExchange> exchange;
  std::unique_ptr<FsdpUnits> units;
  DdpState ddp;
  std::unique_ptr<JobCollectives> collectives;
  std::unique_ptr<RecoveryCoordinator> recovery;
  std::unique_ptr<StateQueries> queries;
  v1::JobSpec spec;                        // as registered
  std::unique_ptr<MetricsServer> http;     // WorkerOptions.metrics_address
  std::unique_ptr<Timeline> timeline;      // WorkerOptions.timeline
  std::unique_ptr<WorkerMetrics> metrics;  // from the first step
  // The end of the last Step() (nullopt before the first), and the caller's
  // time between it and the last Step()'s start (StepPhases::compute_ns).
  std::optional<absl::Time> last_step_end;
  int64_t compute_ns = 0;
  int64_t update_ns = 0;            // ddp's update in the last Step() (StepPhases::update_ns)
  bool evicted = false;             // straggler_evicted() said so
  bool evict_refused_said = false;  // ... and that the job is too small for it, once
  // The last held step this worker released (Worker::ReleaseStep), -1: none.
  int64_t released_step = -1;
  // ddp: the step whose mean PullMean received (Step() applies it), -1: none.
  int64_t pulled_mean_step = -1;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_WORKER_PARTS_H_
