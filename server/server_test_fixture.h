// Test-only pieces shared by the tests that run a real shard server in the
// test process: a fixture that starts a registry (server/test_registry.h) and
// one shard server over UCX with the options its test sets, a hand-rolled
// worker data endpoint over UCX (raw header bytes out, every frame back
// recorded), and the one-bucket DDP job and frame headers those tests send.
#ifndef TESSEL_SERVER_SERVER_TEST_FIXTURE_H_
#define TESSEL_SERVER_SERVER_TEST_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/registry_client.h"
#include "runtime/rank_keys.h"
#include "server/shard_server.h"
#include "server/test_registry.h"
#include "transport/transport_testing.h"

namespace tessel {

// The UCX transports the tests use: shared memory and loopback only.
inline constexpr char kTestUcxTls[] = "posix,sysv,self";

// CreateJob of shard 0 (epoch 1) of DDP job `job` with `world` ranks, one
// shard of one bucket: one fp32 tensor "w" of `floats` elements, SGD lr 0.1.
v1::CreateJobRequest OneBucketDdpJob(const std::string& job, int world, int floats);

// A gradient of `n` floats for rank 0 or 1 of a test job, different for
// each: 0.25 i - 3 for rank 0, 1 - 0.125 i for rank 1.
std::vector<float> TwoRankGradient(int rank, int n);

// Whether `got` is the mean (a + b) / 2 of `a` and `b`, bitwise; else
// the first element that is not.
::testing::AssertionResult IsBitwiseMean(const std::vector<float>& got, const std::vector<float>& a,
                                         const std::vector<float>& b);

// A frame header of `job` (shard 0, bucket 0); a PULL asks for one bucket.
FrameHeader TestFrameHeader(FrameType type, const std::string& job, int64_t epoch, int64_t step,
                            int rank, uint64_t payload_bytes);

// A registry and one shard server (shard 0) over UCX, with options_ as the
// test's constructor set them (registry filled in by SetUp), started in
// SetUp and stopped in TearDown; stub_ talks to its gRPC service.
class UcxShardServerTest : public ::testing::Test {
 protected:
  UcxShardServerTest();
  void SetUp() override;
  // The server's data transport (UCX over kTestUcxTls); a test may wrap it.
  virtual std::unique_ptr<Transport> ServerTransport();
  void TearDown() override;

  grpc::Status CreateJob(const v1::CreateJobRequest& req);
  grpc::Status SetEpoch(const std::string& job, int64_t epoch);
  v1::ShardStats Stats(const std::string& job);
  // Polls until `job` has refused at least `n` frames, up to `timeout`.
  void AwaitRejectedFrames(const std::string& job, int64_t n,
                           absl::Duration timeout = absl::Seconds(5));
  // GetFrameKey for (job, rank, epoch) under `claim`; `max_key_version` 0
  // is a worker from before payload tags; `member_epoch` the caller's
  // registry membership (0: none named; a rank key handover needs it).
  grpc::Status GetFrameKey(const std::string& job, int rank, int64_t epoch,
                           const std::string& claim, int32_t max_key_version,
                           v1::FrameKeyResponse* resp, int64_t member_epoch = 0);
  // A process joined to the test registry as worker `rank` of `job` (its
  // UCX address "worker <rank>"); the test fails if the join does.
  std::unique_ptr<RegistryClient> JoinWorker(const std::string& job, int rank);
  // The keys rank `rank` of `job` gets for `epoch` (a claim of its own, the
  // key version options_ call for); null, with the test failed, if refused.
  // `secret`, if given, receives the rank's secret.
  std::shared_ptr<const RankFrameKeys> KeyOf(const std::string& job, int rank, int64_t epoch = 1,
                                             std::string* secret = nullptr);

  ShardServerOptions options_;
  TestRegistry registry_;
  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<v1::ShardServer::Stub> stub_;
};

// A worker's data endpoint over UCX to one server, hand-rolled: sends raw
// header bytes and payloads, records every frame that comes back (decoded
// header and its bytes as they came) and lands PARAMS payloads of
// `params_floats` floats.
class FakeUcxWorker {
 public:
  struct Frame {
    FrameHeader header;
    std::vector<uint8_t> wire;
  };

  FakeUcxWorker(const std::string& server, size_t params_floats);
  FakeUcxWorker(const FakeUcxWorker&) = delete;
  FakeUcxWorker& operator=(const FakeUcxWorker&) = delete;
  ~FakeUcxWorker();

  void Send(absl::Span<const uint8_t> header, const void* payload, size_t bytes);
  // Waits up to `timeout` until `n` PARAMS payloads have landed.
  bool AwaitParams(int n, absl::Duration timeout = absl::Seconds(10));
  std::vector<Frame> frames();
  // The newest PARAMS frame whose payload was taken, if any.
  std::optional<Frame> last_params_frame();
  // The newest PARAMS payload.
  std::vector<float> params();

 private:
  std::unique_ptr<UcxTransport> transport_;
  PeerId peer_ = 0;
  absl::Mutex mu_;
  std::vector<Frame> frames_ ABSL_GUARDED_BY(mu_);
  std::optional<Frame> last_params_frame_ ABSL_GUARDED_BY(mu_);
  std::vector<float> params_ ABSL_GUARDED_BY(mu_);
  int params_landed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SERVER_TEST_FIXTURE_H_
