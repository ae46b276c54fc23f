// ServerReducer: JobCollectives' Reducer on the shard servers. It is a
// reduce-only DDP job of one vector size, HelperJobName(job, n, epoch)
// (core/job_name.h): on shard 0 for small vectors (a metric, a digest) and
// on every shard of the parent worker for large ones (gradients), which the
// servers reduce in rank order exactly as they reduce a step. It owns what a
// step needs and no more: a JobContext of its own, a DataChannel over a
// transport endpoint of its own, a BucketExchange, and the job on the
// servers (JobControl), created by Make and deleted by DeleteJob.
//
// Contract:
//   - Every rank of the parent job calls Make with the same size at the same
//     membership epoch, and then Mean in the same order: each Mean is one
//     step of the helper job (push, the servers' rank-order mean, pull).
//   - The helper job takes the parent's registry identity, rank, world size
//     and fencing epoch (the epoch is part of its name: a recovery that
//     moves the parent to a new epoch moves it to new helper jobs), and its
//     transport, timeouts, TLS and token. It joins no registry group: the
//     parent's membership is checked inside every wait instead (the check
//     the parent lends), so a rank lost meanwhile ends the wait with the
//     parent's status.
//   - Errors of the helper's own (an ERROR frame, a timeout) name the helper
//     job and are not tagged recoverable; the lent check's are as the parent
//     made them. After a failed Mean the reducer must not be used again
//     (JobCollectives drops it).
//
// Threads: the driving thread of the parent calls everything; frames land
// on the helper transport's progress thread (DataChannel's rules).
//
// Example:
//   ReducerSite site{&ctx, &membership.fleet(), addresses, [&] { return membership.Check(); }};
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Reducer> reducer, ServerReducer::Make(site, 8));
//   TESSEL_RETURN_IF_ERROR(reducer->Mean(absl::MakeSpan(eight_floats)));
//   reducer->DeleteJob();  // one rank, after a barrier (JobCollectives::Release)
#ifndef TESSEL_WORKER_INTERNAL_SERVER_REDUCER_H_
#define TESSEL_WORKER_INTERNAL_SERVER_REDUCER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rpc/shard_fleet.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_collectives.h"
#include "worker/internal/job_context.h"
#include "worker/internal/job_control.h"

namespace tessel::internal {

// What a parent worker lends its reducers; read by Make only.
struct ReducerSite {
  const JobContext* parent = nullptr;
  const ShardFleet* fleet = nullptr;  // the parent's; outlives the reducers
  // Per shard of the parent's: the UCX address the parent reached it at
  // ("" for one it could not reach).
  std::vector<std::string> ucx_addresses;
  // Runs every 250 ms inside a wait (the parent's membership check).
  std::function<absl::Status()> check;
};

// Vectors below this many floats live on shard 0 only.
inline constexpr size_t kReducerShardAllFrom = size_t{1} << 16;

class ServerReducer : public Reducer {
 public:
  // Connects to the shards and creates the helper job for vectors of `size`.
  static absl::StatusOr<std::unique_ptr<Reducer>> Make(const ReducerSite& site, size_t size);
  ~ServerReducer() override;

  absl::Status Mean(absl::Span<float> data) override;
  void DeleteJob() override;

 private:
  ServerReducer(const WorkerOptions& options, const JobContext& parent);
  absl::Status Start(const ReducerSite& site, size_t size);

  JobContext ctx_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<BucketExchange> exchange_;
  std::unique_ptr<JobControl> control_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_SERVER_REDUCER_H_
