// Payload integrity on a real shard server over UCX (issue 42 part 4): with
// --data_integrity=payload every frame carries a tag of its payload under
// its rank's payload key, and the header tag covers that tag. A PUSH whose
// payload changed in flight under a valid header (one byte flipped between
// seal and send) is dropped: no answer, counted, the step does not use it;
// the rank's real push is still taken, the mean is bitwise the real one and
// the PARAMS that come back carry their payload's tag. A worker from before
// payload integrity is refused its key with a message saying why.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "proto/shard.grpc.pb.h"
#include "registry/registry_service.h"
#include "rpc/grpc_util.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "server/shard_server.h"
#include "transport/transport_testing.h"

namespace tessel {
namespace {

constexpr int kFloats = 1024;
constexpr char kTls[] = "posix,sysv,self";

v1::CreateJobRequest DdpJob(const std::string& name, int world) {
  v1::CreateJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job(name);
  spec->set_strategy(v1::STRATEGY_DDP);
  spec->set_world_size(world);
  spec->set_num_shards(1);
  spec->set_bucket_bytes(kFloats * 4);
  v1::TensorSpec* t = spec->add_tensors();
  t->set_name("w");
  t->add_shape(kFloats);
  t->set_dtype(v1::DTYPE_F32);
  spec->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec->mutable_optimizer()->set_lr(0.1);
  req.set_shard_index(0);
  req.set_epoch(1);
  return req;
}

FrameHeader Header(FrameType type, int64_t step, int rank, uint64_t payload_bytes) {
  FrameHeader h = MakeHeader(type, JobId("B"), 1, step, rank, 0, 0);
  h.payload_bytes = payload_bytes;
  if (type == FrameType::kPull) h.bucket_count = 1;
  return h;
}

// A worker's data endpoint: sends raw header bytes, keeps the PARAMS that
// come back (header as it came, payload).
class Endpoint {
 public:
  explicit Endpoint(const std::string& server) : transport_(MakeUcxTransport({.tls = kTls})) {
    transport_->SetHandler([this](const Incoming& in) {
      auto h = DecodeWireHeader(in.header);
      absl::MutexLock lock(&mu_);
      if (!h.ok() || h->type != FrameType::kParams || in.payload_bytes != kFloats * 4) {
        return Accept{};
      }
      header_ = *h;
      wire_.assign(in.header.begin(), in.header.end());
      return Accept{params_.data(), params_.size() * sizeof(float), [this](absl::Status s) {
                      absl::MutexLock lock(&mu_);
                      landed_ += s.ok() ? 1 : 0;
                    }};
    });
    peer_ = *transport_->Connect(server);
  }
  ~Endpoint() { transport_->Shutdown(); }

  void Send(absl::Span<const uint8_t> header, const void* payload, size_t bytes) {
    transport_->Send(peer_, header, payload, bytes, nullptr);
  }
  bool AwaitParams() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(
                                    +[](int* landed) { return *landed > 0; }, &landed_),
                                absl::Seconds(10));
  }
  FrameHeader header() {
    absl::MutexLock lock(&mu_);
    return header_;
  }
  std::vector<uint8_t> wire() {
    absl::MutexLock lock(&mu_);
    return wire_;
  }
  std::vector<float> params() {
    absl::MutexLock lock(&mu_);
    return params_;
  }

 private:
  std::unique_ptr<UcxTransport> transport_;
  PeerId peer_ = 0;
  absl::Mutex mu_;
  FrameHeader header_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> wire_ ABSL_GUARDED_BY(mu_);
  std::vector<float> params_ ABSL_GUARDED_BY(mu_) = std::vector<float>(kFloats);
  int landed_ ABSL_GUARDED_BY(mu_) = 0;
};

class PayloadIntegrityServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_unique<RegistryService>(absl::Seconds(3));
    auto grpc = StartGrpcServer("127.0.0.1:0", {registry_.get()}, &registry_address_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    registry_server_ = std::move(*grpc);
    ShardServerOptions o;
    o.registry = registry_address_;
    o.shard = 0;
    o.data_auth = true;
    o.data_integrity_payload = true;
    o.receive_check_period = absl::ZeroDuration();
    auto server = ShardServer::Start(o, MakeUcxTransport({.tls = kTls}));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::ShardServer::NewStub(MakeChannel(server_->grpc_address()));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown();
      EXPECT_TRUE(server_->Wait().ok());
    }
    registry_->Stop();
    registry_server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
  }

  grpc::Status Ask(int rank, int32_t max_version, v1::FrameKeyResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::FrameKeyRequest req;
    req.set_job("B");
    req.set_rank(rank);
    req.set_epoch(1);
    req.set_claim(NewJobSecret());
    req.set_max_key_version(max_version);
    return stub_->GetFrameKey(&ctx, req, resp);
  }
  std::shared_ptr<const RankFrameKeys> KeyOf(int rank) {
    v1::FrameKeyResponse resp;
    EXPECT_TRUE(Ask(rank, kPayloadKeysVersion, &resp).ok());
    EXPECT_EQ(resp.key_version(), kPayloadKeysVersion);
    auto keys =
        RankFrameKeys::Create(FrameKeyGrant{resp.secret(), "", true}, JobId("B"), 0, rank, 1);
    EXPECT_TRUE(keys.ok()) << keys.status();
    return keys.ok() ? *keys : nullptr;
  }
  v1::ShardStats Stats() {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::JobRef ref;
    ref.set_job("B");
    v1::ShardStats stats;
    EXPECT_TRUE(stub_->GetStats(&ctx, ref, &stats).ok());
    return stats;
  }

  std::unique_ptr<RegistryService> registry_;
  std::unique_ptr<grpc::Server> registry_server_;
  std::string registry_address_;
  std::unique_ptr<ShardServer> server_;
  std::unique_ptr<v1::ShardServer::Stub> stub_;
};

TEST_F(PayloadIntegrityServerTest, APushChangedInFlightIsDroppedAndTheStepUsesTheRealOne) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CreateJobResponse created;
  ASSERT_TRUE(stub_->CreateJob(&ctx, DdpJob("B", 2), &created).ok());
  // A worker from before payload integrity asks without max_key_version.
  v1::FrameKeyResponse old;
  const grpc::Status refused = Ask(1, 0, &old);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("--data_integrity"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(old.secret().empty());
  std::shared_ptr<const RankFrameKeys> r0 = KeyOf(0), r1 = KeyOf(1);
  ASSERT_TRUE(r0 != nullptr && r1 != nullptr);

  const std::string address = server_->transport_address();
  Endpoint rank0(address), rank1(address);
  std::vector<float> g0(kFloats), g1(kFloats);
  for (int i = 0; i < kFloats; ++i) {
    g0[i] = 0.25f * i - 3.f;
    g1[i] = 1.f - 0.125f * i;
  }
  const FrameHeader push1 = Header(FrameType::kPush, 0, 1, kFloats * 4);
  const WireHeader sealed1 = r1->SealFrame(push1, /*to_worker=*/false, g1.data());
  ASSERT_EQ(sealed1.size, kPayloadSealedHeaderBytes);
  // In flight: one payload byte flipped under the valid header; and the
  // header-only seal of the same push (80 bytes: no payload tag).
  std::vector<float> changed = g1;
  reinterpret_cast<uint8_t*>(changed.data())[4 * 517 + 2] ^= 0x01;
  rank1.Send(sealed1.span(), changed.data(), kFloats * 4);
  for (int i = 0; i < 250 && Stats().rejected_frames() < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Stats().rejected_frames(), 1);
  EXPECT_EQ(Stats().pushed_bytes(), 0) << "the changed push was counted";
  rank1.Send(r1->Seal(push1, false), g1.data(), kFloats * 4);
  for (int i = 0; i < 250 && Stats().rejected_frames() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Stats().rejected_frames(), 2);

  // The real pushes: both count, the mean is theirs bitwise.
  const FrameHeader push0 = Header(FrameType::kPush, 0, 0, kFloats * 4);
  rank0.Send(r0->SealFrame(push0, false, g0.data()).span(), g0.data(), kFloats * 4);
  rank1.Send(sealed1.span(), g1.data(), kFloats * 4);
  const FrameHeader pull = Header(FrameType::kPull, 1, 0, 0);
  rank0.Send(r0->SealFrame(pull, false, nullptr).span(), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams()) << "the real workers' step did not complete";
  const std::vector<float> mean = rank0.params();
  for (int i = 0; i < kFloats; ++i) {
    const float want = (g0[i] + g1[i]) / 2.f;
    ASSERT_EQ(std::memcmp(&mean[i], &want, 4), 0) << "element " << i;
  }
  // The PARAMS came with the tag of what landed, under rank 0's down keys.
  const std::vector<uint8_t> wire = rank0.wire();
  ASSERT_EQ(wire.size(), kPayloadSealedHeaderBytes);
  EXPECT_TRUE(r0->Verify(wire, rank0.header()));
  EXPECT_TRUE(r0->VerifyPayload(wire, rank0.header(), mean.data()));
  EXPECT_EQ(Stats().pushed_bytes(), 2 * kFloats * 4);
  EXPECT_EQ(Stats().step(), 1);
  EXPECT_EQ(Stats().rejected_frames(), 2);
}

}  // namespace
}  // namespace tessel
