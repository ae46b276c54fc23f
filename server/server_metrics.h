// A shard server's Prometheus metrics (served at --metrics_address).
//
// Data path (updated as frames come and go, labels shard and type/reason):
//   tessel_server_frames_received_total{shard,type}   push, init, pull, other
//   tessel_server_received_bytes_total{shard}
//   tessel_server_frames_sent_total{shard,type}       params, error
//   tessel_server_sent_bytes_total{shard}
//   tessel_server_frames_refused_total{shard,reason}  malformed, unknown_job,
//       size_mismatch, bad_type, or the refusal's status in lower case
//       (failed_precondition: a stale epoch or step; already_exists: a
//       duplicate push; invalid_argument; out_of_range; ...)
//   tessel_server_update_seconds{job,shard}           one bucket's reduction + optimizer
//   tessel_server_updated_elements_total{job,shard}   optimizer throughput (rate())
// When scraped (from the jobs, the update queue and the checkpointer):
//   tessel_server_update_queue_depth{shard}
//   tessel_server_job_step{job,shard}, tessel_server_job_epoch{job,shard}
//   tessel_server_job_applied_steps_total, _pushed_bytes_total,
//   _pulled_bytes_total, _refused_frames_total, _stale_epoch_frames_total,
//   _recoveries_total {job,shard}
//   tessel_server_job_memory_bytes{job,shard}
//   tessel_checkpoint_queue_depth{shard}
//   tessel_checkpoint_newest_age_seconds{job}   (the shard that finalizes: 0)
// Checkpoints: server/checkpoint_metrics.h.
//
// Several servers in one process (tests) share the families; the shard label
// tells them apart. A job's series go when it is deleted.
#ifndef TESSEL_SERVER_SERVER_METRICS_H_
#define TESSEL_SERVER_SERVER_METRICS_H_

#include <array>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "core/wire.h"
#include "runtime/metrics.h"

namespace tessel {

class JobTable;
class Checkpointer;

class ServerMetrics {
 public:
  explicit ServerMetrics(int shard);

  void FrameReceived(FrameType type, uint64_t payload_bytes);
  void FrameSent(FrameType type, uint64_t payload_bytes);
  void FrameRefused(absl::string_view reason);
  void BucketUpdated(const std::string& job, int64_t elements, double seconds);

  // Refreshes the scrape-time series from `jobs`, `queue_depth()` and
  // `checkpointer` on each scrape, while the returned handle lives; drops
  // the series of jobs no longer in the table.
  [[nodiscard]] metrics::Registry::CollectorHandle Watch(JobTable* jobs,
                                                         std::function<int64_t()> queue_depth,
                                                         Checkpointer* checkpointer);

  const std::string& shard() const { return shard_; }

 private:
  const std::string shard_;
  std::array<metrics::Counter*, 4> received_;  // push, init, pull, other
  metrics::Counter* received_bytes_;
  std::array<metrics::Counter*, 2> sent_;  // params, error
  metrics::Counter* sent_bytes_;
};

// The reason label of a refusal with status `code`: its name in lower case.
std::string RefusalReason(int code);

}  // namespace tessel

#endif  // TESSEL_SERVER_SERVER_METRICS_H_
