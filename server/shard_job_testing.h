// Test helpers for a ShardJob on shard 0: the one-tensor job most tests
// run, a frame header addressed to it as a worker would send it, the
// deterministic values tests push, INIT of every bucket with them, and a
// bitwise comparison.
#ifndef TESSEL_SERVER_SHARD_JOB_TESTING_H_
#define TESSEL_SERVER_SHARD_JOB_TESTING_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/wire.h"
#include "gtest/gtest.h"
#include "server/shard_job.h"

namespace tessel {

// Adam with lr `lr`, betas 0.9 and 0.999, eps 1e-8.
inline v1::OptimizerConfig TestAdam(double lr = 1e-2) {
  v1::OptimizerConfig o;
  o.set_kind(v1::OptimizerConfig::ADAM);
  o.set_lr(lr);
  o.set_beta1(0.9);
  o.set_beta2(0.999);
  o.set_eps(1e-8);
  return o;
}

// Job `job`, one shard, `world` ranks, one tensor "w" of `elements` (`dtype`)
// in buckets of `bucket_floats` floats, TestAdam().
inline v1::JobSpec OneTensorSpec(const std::string& job, v1::Strategy strategy, int world,
                                 int64_t elements, int64_t bucket_floats,
                                 v1::DType dtype = v1::DTYPE_F32) {
  v1::JobSpec spec;
  spec.set_job(job);
  spec.set_strategy(strategy);
  spec.set_world_size(world);
  spec.set_num_shards(1);
  spec.set_bucket_bytes(bucket_floats * 4);
  v1::TensorSpec* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(elements);
  t->set_dtype(dtype);
  *spec.mutable_optimizer() = TestAdam();
  return spec;
}

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

// Shard 0 of `spec` at `epoch`, initialized with InitWithTestValues unless
// DDP (which takes no INIT); null (and a test failure) if it is refused.
inline std::unique_ptr<ShardJob> InitializedJob(const v1::JobSpec& spec, int64_t epoch) {
  absl::StatusOr<std::unique_ptr<ShardJob>> created = ShardJob::Create(spec, 0, epoch);
  EXPECT_TRUE(created.ok()) << created.status();
  if (!created.ok()) return nullptr;
  if (spec.strategy() != v1::STRATEGY_DDP) InitWithTestValues(**created, epoch);
  return std::move(*created);
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
