// Test helper: a frame header addressed to a ShardJob (its job id, shard 0,
// its current step), as a worker would send it.
#ifndef TESSEL_SERVER_SHARD_JOB_TESTING_H_
#define TESSEL_SERVER_SHARD_JOB_TESTING_H_

#include <cstdint>

#include "core/wire.h"
#include "server/shard_job.h"

namespace tessel {

// payload_bytes is the bucket's served size (the wire precision's); INIT
// and PULL callers set their own.
inline FrameHeader JobFrame(ShardJob& job, int64_t epoch, FrameType type, int rank, int bucket) {
  FrameHeader h;
  h.type = type;
  h.job_id = job.job_id();
  h.epoch = epoch;
  h.step = job.version();
  h.rank = rank;
  h.shard = 0;
  h.bucket = bucket;
  h.payload_bytes = job.served_bytes(bucket);
  return h;
}

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_JOB_TESTING_H_
