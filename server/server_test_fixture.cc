#include "server/server_test_fixture.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/grpc_util.h"

namespace tessel {

v1::CreateJobRequest OneBucketDdpJob(const std::string& job, int world, int floats) {
  v1::CreateJobRequest req;
  v1::JobSpec* spec = req.mutable_spec();
  spec->set_job(job);
  spec->set_strategy(v1::STRATEGY_DDP);
  spec->set_world_size(world);
  spec->set_num_shards(1);
  spec->set_bucket_bytes(floats * 4);
  v1::TensorSpec* t = spec->add_tensors();
  t->set_name("w");
  t->add_shape(floats);
  t->set_dtype(v1::DTYPE_F32);
  spec->mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  spec->mutable_optimizer()->set_lr(0.1);
  req.set_shard_index(0);
  req.set_epoch(1);
  return req;
}

std::vector<float> TwoRankGradient(int rank, int n) {
  std::vector<float> g(n);
  for (int i = 0; i < n; ++i) g[i] = rank == 0 ? 0.25f * i - 3.f : 1.f - 0.125f * i;
  return g;
}

::testing::AssertionResult IsBitwiseMean(const std::vector<float>& got, const std::vector<float>& a,
                                         const std::vector<float>& b) {
  if (got.size() != a.size() || got.size() != b.size()) {
    return ::testing::AssertionFailure() << got.size() << " elements, not " << a.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = (a[i] + b[i]) / 2.f;
    if (std::memcmp(&got[i], &want, sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << " is " << got[i] << ", not " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

FrameHeader TestFrameHeader(FrameType type, const std::string& job, int64_t epoch, int64_t step,
                            int rank, uint64_t payload_bytes) {
  FrameHeader h = MakeHeader(type, JobId(job), epoch, step, rank, 0, 0);
  h.payload_bytes = payload_bytes;
  if (type == FrameType::kPull) h.bucket_count = 1;
  return h;
}

UcxShardServerTest::UcxShardServerTest() {
  options_.shard = 0;
  options_.receive_check_period = absl::ZeroDuration();
}

void UcxShardServerTest::SetUp() {
  absl::Status registry = registry_.Start();
  ASSERT_TRUE(registry.ok()) << registry;
  options_.registry = registry_.address();
  auto server = ShardServer::Start(options_, ServerTransport());
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  stub_ = v1::ShardServer::NewStub(MakeChannel(server_->grpc_address()));
}

std::unique_ptr<Transport> UcxShardServerTest::ServerTransport() {
  return MakeUcxTransport({.tls = kTestUcxTls});
}

void UcxShardServerTest::TearDown() {
  if (server_ != nullptr) {
    server_->Shutdown();
    EXPECT_TRUE(server_->Wait().ok());
  }
  registry_.Stop();
}

grpc::Status UcxShardServerTest::CreateJob(const v1::CreateJobRequest& req) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CreateJobResponse resp;
  return stub_->CreateJob(&ctx, req, &resp);
}

grpc::Status UcxShardServerTest::SetEpoch(const std::string& job, int64_t epoch) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::SetEpochRequest req;
  req.set_job(job);
  req.set_epoch(epoch);
  v1::SetEpochResponse resp;
  return stub_->SetEpoch(&ctx, req, &resp);
}

v1::ShardStats UcxShardServerTest::Stats(const std::string& job) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::JobRef ref;
  ref.set_job(job);
  v1::ShardStats stats;
  EXPECT_TRUE(stub_->GetStats(&ctx, ref, &stats).ok());
  return stats;
}

void UcxShardServerTest::AwaitRejectedFrames(const std::string& job, int64_t n,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Stats(job).rejected_frames() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
}

grpc::Status UcxShardServerTest::GetFrameKey(const std::string& job, int rank, int64_t epoch,
                                             const std::string& claim, int32_t max_key_version,
                                             v1::FrameKeyResponse* resp, int64_t member_epoch) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::FrameKeyRequest req;
  req.set_job(job);
  req.set_rank(rank);
  req.set_epoch(epoch);
  req.set_claim(claim);
  if (max_key_version != 0) req.set_max_key_version(max_key_version);
  if (member_epoch != 0) req.set_member_epoch(member_epoch);
  return stub_->GetFrameKey(&ctx, req, resp);
}

std::unique_ptr<RegistryClient> UcxShardServerTest::JoinWorker(const std::string& job, int rank) {
  auto client = std::make_unique<RegistryClient>(registry_.address());
  v1::Member m;
  m.set_group(job);
  m.set_role(v1::ROLE_WORKER);
  m.set_rank(rank);
  m.set_ucx_address(absl::StrCat("worker ", rank));
  auto joined = client->Join(m, absl::Seconds(30));
  EXPECT_TRUE(joined.ok()) << joined.status();
  return client;
}

std::shared_ptr<const RankFrameKeys> UcxShardServerTest::KeyOf(const std::string& job, int rank,
                                                               int64_t epoch, std::string* secret) {
  const bool payload = options_.data_integrity_payload;
  v1::FrameKeyResponse resp;
  const grpc::Status s =
      GetFrameKey(job, rank, epoch, NewJobSecret(), payload ? kPayloadKeysVersion : 0, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.key_version(), payload ? kPayloadKeysVersion : kRankKeysVersion);
  if (secret != nullptr) *secret = resp.secret();
  auto keys = RankFrameKeys::Create(FrameKeyGrant{resp.secret(), resp.host_secret(), payload},
                                    JobId(job), 0, rank, epoch);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return keys.ok() ? *keys : nullptr;
}

FakeUcxWorker::FakeUcxWorker(const std::string& server, size_t params_floats)
    : transport_(MakeUcxTransport({.tls = kTestUcxTls})), params_(params_floats) {
  const uint64_t params_bytes = params_floats * sizeof(float);
  transport_->SetHandler([this, params_bytes](const Incoming& in) {
    auto h = DecodeWireHeader(in.header);
    absl::MutexLock lock(&mu_);
    if (!h.ok()) return Accept{};
    Frame frame{*h, std::vector<uint8_t>(in.header.begin(), in.header.end())};
    frames_.push_back(frame);
    if (h->type != FrameType::kParams || in.payload_bytes != params_bytes) return Accept{};
    last_params_frame_ = std::move(frame);
    return Accept{params_.data(), params_bytes, [this](absl::Status s) {
                    absl::MutexLock lock(&mu_);
                    params_landed_ += s.ok() ? 1 : 0;
                  }};
  });
  auto peer = transport_->Connect(server);
  EXPECT_TRUE(peer.ok()) << peer.status();
  if (peer.ok()) peer_ = *peer;
}

FakeUcxWorker::~FakeUcxWorker() { transport_->Shutdown(); }

void FakeUcxWorker::Send(absl::Span<const uint8_t> header, const void* payload, size_t bytes) {
  transport_->Send(peer_, header, payload, bytes, nullptr);
}

bool FakeUcxWorker::AwaitParams(int n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  struct Want {
    const int* landed;
    int n;
  } want{&params_landed_, n};
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](Want* w) { return *w->landed >= w->n; }, &want),
                              timeout);
}

std::vector<FakeUcxWorker::Frame> FakeUcxWorker::frames() {
  absl::MutexLock lock(&mu_);
  return frames_;
}

std::optional<FakeUcxWorker::Frame> FakeUcxWorker::last_params_frame() {
  absl::MutexLock lock(&mu_);
  return last_params_frame_;
}

std::vector<float> FakeUcxWorker::params() {
  absl::MutexLock lock(&mu_);
  return params_;
}

}  // namespace tessel
