// Test helpers for a ShardJob on shard 0: a frame header addressed to it as a
// worker would send it, the deterministic values tests push, INIT of every
// bucket with them, and a bitwise comparison.
#ifndef TESSEL_SERVER_SHARD_JOB_TESTING_H_
#define TESSEL_SERVER_SHARD_JOB_TESTING_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/wire.h"
#include "gtest/gtest.h"
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

// A rank's value for element i of a step (`salt`): spread over [-1, 1],
// different per rank and step.
inline float TestValue(int rank, int64_t i, int salt) {
  return static_cast<float>((i * 7919 + rank * 104729 + salt * 31) % 2001 - 1000) / 997.f;
}

// Rank 0's INIT of every bucket, element i = TestValue(0, i, 99).
inline void InitWithTestValues(ShardJob& job, int64_t epoch) {
  for (int b = 0; b < job.layout().num_buckets(0); ++b) {
    FrameHeader h = JobFrame(job, epoch, FrameType::kInit, 0, b);
    h.payload_bytes = static_cast<uint64_t>(job.bucket_elements(b)) * 4;
    auto dst = job.AcceptData(h);
    ASSERT_TRUE(dst.ok()) << dst.status();
    const Range br = job.layout().bucket_range(0, b);
    float* to = static_cast<float*>(*dst);
    for (int64_t i = br.begin; i < br.end; ++i) to[i - br.begin] = TestValue(0, i, 99);
    job.CompleteReceive(h, absl::OkStatus());
  }
}

inline void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) ++differ;
  }
  EXPECT_EQ(differ, 0) << "elements differing from the reference reduction";
}

}  // namespace tessel

#endif  // TESSEL_SERVER_SHARD_JOB_TESTING_H_
