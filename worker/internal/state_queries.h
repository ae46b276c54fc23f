// StateQueries: the seeds' state queries, for every strategy. Each is a
// collective (every rank calls it at the same point, between steps) built on
// JobCollectives, and changes nothing unless it says so:
//   SynchronizeGradients   the data-parallel mean of this step's gradients,
//                          reduced in rank order exactly as the step will.
//   SynchronizeOptimizerState  ZeRO/FSDP: every shard at this step, with its
//                          digest; DDP: compares every rank's (step, params,
//                          state) digest and copies rank 0's onto any that
//                          drifted.
//   Serialize/Deserialize  the whole training state as a portable blob
//                          (worker/train_state.h); a bad blob is refused on
//                          every rank and changes nothing.
//   LoadParameters         new parameters, the optimizer state and step kept
//                          (a pretrained model loaded mid-training).
//   ReportMetric           early stopping over the job-wide mean.
//   ServerStats            every shard server's view of the job.
//
// Threads: the driving thread.
//
// Example: every rank, between steps:
//   StateQueries queries(StateQueryParts{&ctx, &exchange, &units, &ddp, &collectives,
//                                        &control, &fleet, &spec});
//   TESSEL_ASSIGN_OR_RETURN(std::string blob, queries.Serialize());
//   TESSEL_RETURN_IF_ERROR(queries.Deserialize(blob));  // the same state again
//   TESSEL_ASSIGN_OR_RETURN(bool stop, queries.ReportMetric(validation_loss));
#ifndef TESSEL_WORKER_INTERNAL_STATE_QUERIES_H_
#define TESSEL_WORKER_INTERNAL_STATE_QUERIES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/early_stopping.h"
#include "proto/shard.pb.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/ddp_state.h"
#include "worker/internal/fsdp_units.h"
#include "worker/internal/job_collectives.h"
#include "worker/internal/job_context.h"
#include "worker/internal/job_control.h"
#include "worker/reports.h"

namespace tessel::internal {

struct StateQueryParts {
  JobContext* ctx;
  BucketExchange* exchange;
  FsdpUnits* units;
  DdpState* ddp;
  JobCollectives* collectives;
  const JobControl* control;
  const ShardFleet* fleet;  // ReadServerState/WriteServerState
  const v1::JobSpec* spec;
};

class StateQueries {
 public:
  explicit StateQueries(const StateQueryParts& parts);

  absl::StatusOr<absl::Span<const float>> SynchronizeGradients();
  absl::StatusOr<OptimizerStateReport> SynchronizeOptimizerState();
  absl::StatusOr<std::string> Serialize();
  absl::Status Deserialize(absl::string_view blob);
  // Replaces the job's parameters (fp32, num_params() of them, every rank
  // the same values) and keeps the optimizer state and the step: Serialize,
  // the parameters swapped, Deserialize. On error nothing changed.
  absl::Status LoadParameters(absl::Span<const float> params);
  absl::StatusOr<bool> ReportMetric(float value);
  bool ShouldEarlyStop() const { return early_stop_; }
  const EarlyStopping& early_stopping() const { return stopper_; }
  absl::StatusOr<std::vector<ShardReport>> ServerStats();

 private:
  StateQueryParts p_;
  std::vector<float> synced_grads_;  // SynchronizeGradients' result
  EarlyStopping stopper_;
  bool early_stop_ = false;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_STATE_QUERIES_H_
