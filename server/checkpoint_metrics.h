// The checkpoint writer's Prometheus metrics (server/checkpointer.cc updates
// them; ServerMetrics::Watch sets the scrape-time ones):
//   tessel_checkpoint_write_seconds{job,shard}        one shard file's write
//   tessel_checkpoint_written_bytes_total{job,shard}  parameters + optimizer state
//   tessel_checkpoint_writes_total{job,shard,result}  ok, error
//   tessel_checkpoint_queue_depth{shard}              snapshots queued or being written
//   tessel_checkpoint_newest_step{job}                newest complete checkpoint this
//   tessel_checkpoint_newest_timestamp_seconds{job}     server finalized (shard 0 does)
//   tessel_checkpoint_newest_age_seconds{job}         seconds since then, when scraped
#ifndef TESSEL_SERVER_CHECKPOINT_METRICS_H_
#define TESSEL_SERVER_CHECKPOINT_METRICS_H_

#include <string>

#include "runtime/metrics.h"

namespace tessel {

struct CheckpointFamilies {
  metrics::Family& write_seconds;
  metrics::Family& written_bytes;
  metrics::Family& writes;
  metrics::Family& queue;
  metrics::Family& newest_step;
  metrics::Family& newest_time;
  metrics::Family& newest_age;
  metrics::Family& failing_since;
};

CheckpointFamilies& CheckpointMetrics();

void CheckpointWritten(const std::string& job, int shard, double seconds, int64_t bytes, bool ok);
void CheckpointFinalized(const std::string& job, int64_t step);

// Seconds since the Unix epoch, now.
double UnixSeconds();

}  // namespace tessel

#endif  // TESSEL_SERVER_CHECKPOINT_METRICS_H_
