// Bad input on the data path gets a clear ERROR frame and changes nothing.
//
// One suite, two backends: (1) the shard server's DataPlane in this process
// over the in-process transport; (2) a real tessel-server process, reached
// over UCX and gRPC on loopback. Each test checks the refusal code and text,
// and that the server's state digest (params, optimizer state, step) is the
// same before and after.
#include <atomic>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "rpc/job_spec.h"
#include "rpc/registry_client.h"
#include "runtime/metrics.h"
#include "server/data_plane.h"
#include "server/job_table.h"
#include "server/server_metrics.h"
#include "server/shard_job_proto.h"
#include "testing/local_cluster.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kParams = 1000;
constexpr int64_t kBucketElems = 256;  // 4 buckets: 256, 256, 256, 232
constexpr int64_t kEpoch = 3;

v1::JobSpec Spec(const std::string& job) {
  v1::JobSpec spec;
  spec.set_job(job);
  spec.set_strategy(v1::STRATEGY_ZERO2);
  spec.set_world_size(kWorld);
  spec.set_num_shards(1);
  auto* t = spec.add_tensors();
  t->set_name("w");
  t->add_shape(kParams);
  t->set_dtype(v1::DTYPE_F32);
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kSgd;
  opt.lr = 0.5f;
  opt.momentum = 0.9f;
  *spec.mutable_optimizer() = OptimizerToProto(opt);
  spec.set_bucket_bytes(kBucketElems * 4);
  spec.set_align_elems(1);
  return spec;
}

// What a test needs from a backend: control calls and a client endpoint.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual absl::Status CreateJob(const v1::CreateJobRequest& req) = 0;
  virtual absl::StatusOr<v1::ShardStats> Stats(const std::string& job) = 0;
  virtual Transport* client() = 0;
  virtual PeerId server() = 0;
  // Why the backend could not start (the test stops there, with the reason).
  virtual absl::Status ready() const { return absl::OkStatus(); }
  // tessel_server_frames_refused_total for `reason` on this server; -1 where
  // the backend cannot read it (a server process: tests/metrics_test.py).
  virtual double Refused(const std::string& reason) { return -1; }
};

class InProcBackend : public Backend {
 public:
  InProcBackend() {
    auto fabric = std::make_shared<InProcFabric>();
    server_transport_ = InProcTransport::Create(fabric);
    plane_ = std::make_unique<DataPlane>(server_transport_.get(), &jobs_, &checkpointer_, &metrics_,
                                         /*timeline=*/nullptr, /*update_threads=*/1,
                                         /*spin=*/absl::ZeroDuration());  // as in-process clusters
    client_ = InProcTransport::Create(fabric);
    server_peer_ = *client_->Connect(server_transport_->address());
  }
  ~InProcBackend() override {
    client_->Shutdown();
    server_transport_->Shutdown();
  }
  absl::Status CreateJob(const v1::CreateJobRequest& req) override {
    return jobs_.CreateJob(req).status();
  }
  absl::StatusOr<v1::ShardStats> Stats(const std::string& job) override {
    auto j = jobs_.FindJob(job);
    if (j == nullptr) return absl::NotFoundError(job);
    return ShardStatsProto(*j);
  }
  Transport* client() override { return client_.get(); }
  PeerId server() override { return server_peer_; }
  double Refused(const std::string& reason) override {
    const std::string text = metrics::Default().Expose();
    const std::string key = absl::StrCat("tessel_server_frames_refused_total{shard=\"",
                                         metrics_.shard(), "\",reason=\"", reason, "\"} ");
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

 private:
  // A shard label of its own: each test's server starts from zero.
  static int NextShard() {
    static std::atomic<int> next{1000};
    return next++;
  }
  ServerMetrics metrics_{NextShard()};
  Checkpointer checkpointer_{nullptr};
  JobTable jobs_{&checkpointer_};
  std::unique_ptr<InProcTransport> server_transport_;
  std::unique_ptr<DataPlane> plane_;
  std::unique_ptr<InProcTransport> client_;
  PeerId server_peer_ = 0;
};

class ProcessBackend : public Backend {
 public:
  ProcessBackend() {
    ClusterOptions o;
    o.servers = 1;
    o.run_dir = MakeRunDir("bad-input");
    // Raw RPCs and frames with no credential: what this suite sends is bad
    // input, not unauthenticated input (tests/attack_test covers that).
    o.insecure = true;
    cluster_ = std::make_unique<LocalCluster>(o);
    ready_ = cluster_->Start();
    if (!ready_.ok()) return;
    RegistryClient registry(cluster_->registry_address());
    auto view = registry.GetView("default");
    if (!view.ok() || view->members_size() != 1) {
      ready_ = absl::InternalError(absl::StrCat(
          "the pool should hold the one server: ",
          view.ok() ? view->ShortDebugString() : std::string(view.status().message())));
      return;
    }
    const v1::Member& m = view->members(0);
    stub_ = v1::ShardServer::NewStub(MakeChannel(m.grpc_address()));
    auto t = UcxTransport::Create({});
    if (!t.ok()) {
      ready_ = t.status();
      return;
    }
    client_ = std::move(*t);
    auto peer = client_->Connect(m.ucx_address());
    ready_ = peer.status();
    if (peer.ok()) server_peer_ = *peer;
  }
  ~ProcessBackend() override {
    if (client_ != nullptr) client_->Shutdown();
    cluster_->Stop();
  }
  absl::Status ready() const override { return ready_; }
  absl::Status CreateJob(const v1::CreateJobRequest& req) override {
    v1::CreateJobResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return FromGrpc(stub_->CreateJob(&ctx, req, &resp), "CreateJob");
  }
  absl::StatusOr<v1::ShardStats> Stats(const std::string& job) override {
    v1::JobRef ref;
    ref.set_job(job);
    v1::ShardStats st;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    TESSEL_RETURN_IF_ERROR(FromGrpc(stub_->GetStats(&ctx, ref, &st), "GetStats"));
    return st;
  }
  Transport* client() override { return client_.get(); }
  PeerId server() override { return server_peer_; }

 private:
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<v1::ShardServer::Stub> stub_;
  std::unique_ptr<UcxTransport> client_;
  PeerId server_peer_ = 0;
  absl::Status ready_;
};

struct Reply {
  FrameHeader header;
  std::string error;  // ERROR payload
};

class BadInputTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "inproc") {
      backend_ = std::make_unique<InProcBackend>();
    } else {
      backend_ = std::make_unique<ProcessBackend>();
    }
    ASSERT_TRUE(backend_->ready().ok()) << backend_->ready();
    params_.resize(kParams);
    std::iota(params_.begin(), params_.end(), 0.f);
    grads_.assign(kParams, 0.25f);
    received_.assign(kParams, 0.f);
    backend_->client()->SetHandler([this](const Incoming& in) -> Accept {
      auto h = DecodeHeader(in.header.data(), in.header.size());
      EXPECT_TRUE(h.ok());
      auto reply = std::make_shared<Reply>();
      reply->header = *h;
      void* dst = nullptr;
      size_t room = 0;
      if (h->type == FrameType::kError) {
        reply->error.resize(in.payload_bytes);
        dst = reply->error.data();
        room = reply->error.size();
      } else if (h->type == FrameType::kParams) {
        dst = received_.data() + h->bucket * kBucketElems;
        room = (received_.size() - h->bucket * kBucketElems) * sizeof(float);
      }
      auto done = [this, reply](absl::Status s) {
        absl::MutexLock lock(&mu_);
        replies_.push_back(*reply);
      };
      if (in.payload_bytes == 0) {
        done(absl::OkStatus());
        return Accept{};
      }
      return Accept{dst, room, done};
    });
    v1::CreateJobRequest req;
    *req.mutable_spec() = Spec("job");
    req.set_epoch(kEpoch);
    ASSERT_TRUE(backend_->CreateJob(req).ok());
    // Initialize (rank 0 sends the 4 buckets) and pull step 0.
    for (int b = 0; b < 4; ++b) Send(Header(FrameType::kInit, 0, b), params_.data() + b * 256);
    Send(Header(FrameType::kPull, 0, 0), nullptr);
    ASSERT_EQ(WaitReplies(4), 4u);
    EXPECT_EQ(received_, params_);
    TakeReplies();
  }

  FrameHeader Header(FrameType type, int rank, int bucket, int64_t step = 0) {
    FrameHeader h;
    h.type = type;
    h.job_id = JobId("job");
    h.epoch = kEpoch;
    h.step = step;
    h.rank = rank;
    h.shard = 0;
    h.bucket = bucket;
    if (type == FrameType::kInit || type == FrameType::kPush) {
      h.payload_bytes = (bucket == 3 ? 232 : 256) * sizeof(float);
    }
    if (type == FrameType::kPull) h.bucket_count = 4;
    return h;
  }

  void Send(const FrameHeader& h, const float* data) { SendRaw(EncodeHeader(h), h, data); }
  void SendRaw(const HeaderBytes& bytes, const FrameHeader& h, const float* data,
               size_t header_size = kHeaderBytes) {
    backend_->client()->Send(backend_->server(), absl::MakeConstSpan(bytes.data(), header_size),
                             data, h.payload_bytes, nullptr);
  }

  size_t WaitReplies(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() { return replies_.size() >= n; };
    struct Arg {
      decltype(enough)* f;
    } arg{&enough};
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](Arg* a) { return (*a->f)(); }, &arg),
                         absl::Seconds(20));
    return replies_.size();
  }
  std::vector<Reply> TakeReplies() {
    absl::MutexLock lock(&mu_);
    std::vector<Reply> r;
    r.swap(replies_);
    return r;
  }
  v1::ShardStats StatsNow() {
    auto st = backend_->Stats("job");
    EXPECT_TRUE(st.ok()) << st.status();
    return st.ok() ? *st : v1::ShardStats();
  }

  // Sends one bad frame; expects exactly one ERROR with `code` and `text`,
  // and the state digest and step unchanged.
  void ExpectRefused(const HeaderBytes& bytes, const FrameHeader& h, const float* data,
                     absl::StatusCode code, const std::string& text,
                     size_t header_size = kHeaderBytes) {
    const v1::ShardStats before = StatsNow();
    SendRaw(bytes, h, data, header_size);
    ASSERT_EQ(WaitReplies(1), 1u) << "no reply to a bad frame (" << text << ")";
    absl::SleepFor(absl::Milliseconds(20));
    std::vector<Reply> replies = TakeReplies();
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].header.type, FrameType::kError);
    EXPECT_EQ(replies[0].header.code, static_cast<int>(code)) << replies[0].error;
    EXPECT_NE(replies[0].error.find(text), std::string::npos)
        << "error '" << replies[0].error << "' does not mention '" << text << "'";
    const v1::ShardStats after = StatsNow();
    EXPECT_EQ(after.state_digest(), before.state_digest());
    EXPECT_EQ(after.step(), before.step());
  }
  void ExpectRefused(const FrameHeader& h, const float* data, absl::StatusCode code,
                     const std::string& text) {
    ExpectRefused(EncodeHeader(h), h, data, code, text);
  }

  std::unique_ptr<Backend> backend_;
  std::vector<float> params_, grads_, received_;
  absl::Mutex mu_;
  std::vector<Reply> replies_ ABSL_GUARDED_BY(mu_);
};

TEST_P(BadInputTest, WrongBucketSize) {
  FrameHeader h = Header(FrameType::kPush, 0, 1);
  h.payload_bytes = 100 * sizeof(float);
  ExpectRefused(h, grads_.data(), absl::StatusCode::kInvalidArgument, "expected 1024");
}

TEST_P(BadInputTest, WrongStep) {
  ExpectRefused(Header(FrameType::kPush, 0, 0, /*step=*/5), grads_.data(),
                absl::StatusCode::kFailedPrecondition,
                "push for step 5 but the shard is at step 0");
  ExpectRefused(Header(FrameType::kPull, 0, 0, /*step=*/7), nullptr,
                absl::StatusCode::kFailedPrecondition, "pull for step 7");
  FrameHeader too_many = Header(FrameType::kPull, 0, 2);
  ExpectRefused(too_many, nullptr, absl::StatusCode::kInvalidArgument,
                "PULL of buckets [2, 6) is outside [0, 4)");
}

TEST_P(BadInputTest, StaleEpoch) {
  FrameHeader h = Header(FrameType::kPush, 1, 0);
  h.epoch = kEpoch - 1;
  ExpectRefused(h, grads_.data(), absl::StatusCode::kFailedPrecondition,
                "epoch 2 but the job is at epoch 3");
}

TEST_P(BadInputTest, UnknownJob) {
  FrameHeader h = Header(FrameType::kPush, 0, 0);
  h.job_id = JobId("no-such-job");
  ExpectRefused(h, grads_.data(), absl::StatusCode::kNotFound, "no such job");
}

TEST_P(BadInputTest, TruncatedFrame) {
  FrameHeader h = Header(FrameType::kPush, 0, 0);
  ExpectRefused(EncodeHeader(h), h, grads_.data(), absl::StatusCode::kInvalidArgument,
                "frame header is 40 bytes", /*header_size=*/40);
}

TEST_P(BadInputTest, CorruptHeaderAndLyingLength) {
  FrameHeader h = Header(FrameType::kPush, 0, 0);
  HeaderBytes bad = EncodeHeader(h);
  bad[0] = 'X';
  ExpectRefused(bad, h, grads_.data(), absl::StatusCode::kInvalidArgument, "magic");
  // Header claims 1024 bytes, 512 arrive.
  FrameHeader lying = h;
  lying.payload_bytes = 512;
  HeaderBytes lie = EncodeHeader(h);
  ExpectRefused(lie, lying, grads_.data(), absl::StatusCode::kInvalidArgument, "truncated");
}

TEST_P(BadInputTest, RefusalsAreCountedByReason) {
  if (backend_->Refused("malformed") < 0)
    GTEST_SKIP() << "a server process: metrics_test scrapes it";
  FrameHeader unknown = Header(FrameType::kPush, 0, 0);
  unknown.job_id = JobId("no-such-job");
  ExpectRefused(unknown, grads_.data(), absl::StatusCode::kNotFound, "no such job");
  HeaderBytes bad = EncodeHeader(Header(FrameType::kPush, 0, 0));
  bad[0] = 'X';
  ExpectRefused(bad, Header(FrameType::kPush, 0, 0), grads_.data(),
                absl::StatusCode::kInvalidArgument, "magic");
  ExpectRefused(Header(FrameType::kPush, 0, 0, /*step=*/5), grads_.data(),
                absl::StatusCode::kFailedPrecondition, "push for step 5");
  ExpectRefused(Header(FrameType::kPush, 0, 0, /*step=*/6), grads_.data(),
                absl::StatusCode::kFailedPrecondition, "push for step 6");
  EXPECT_EQ(backend_->Refused("unknown_job"), 1);
  EXPECT_EQ(backend_->Refused("malformed"), 1);
  EXPECT_EQ(backend_->Refused("failed_precondition"), 2);
  EXPECT_EQ(backend_->Refused("invalid_argument"), 0);
}

TEST_P(BadInputTest, BadRankBucketShardAndRoles) {
  ExpectRefused(Header(FrameType::kPush, 2, 0), grads_.data(), absl::StatusCode::kInvalidArgument,
                "rank 2 is outside [0, 2)");
  ExpectRefused(Header(FrameType::kPush, 0, 4), grads_.data(), absl::StatusCode::kInvalidArgument,
                "bucket 4 is outside [0, 4)");
  FrameHeader other_shard = Header(FrameType::kPush, 0, 0);
  other_shard.shard = 1;
  ExpectRefused(other_shard, grads_.data(), absl::StatusCode::kInvalidArgument,
                "addressed to shard 1");
  ExpectRefused(Header(FrameType::kInit, 0, 0), params_.data(),
                absl::StatusCode::kFailedPrecondition, "already initialized");
  ExpectRefused(Header(FrameType::kParams, 0, 0), nullptr, absl::StatusCode::kInvalidArgument,
                "do not accept PARAMS");
}

TEST_P(BadInputTest, DuplicatePushIsRefusedAndAFullStepStillWorks) {
  Send(Header(FrameType::kPush, 0, 0), grads_.data());
  ExpectRefused(Header(FrameType::kPush, 0, 0), grads_.data(), absl::StatusCode::kAlreadyExists,
                "already pushed bucket 0");
  // Complete the step: the refused frames changed nothing, so the result is
  // exactly SGD with momentum on the mean gradient (0.25): p - 0.5 * 0.25.
  for (int b = 0; b < 4; ++b) {
    if (b != 0) Send(Header(FrameType::kPush, 0, b), grads_.data() + b * 256);
    Send(Header(FrameType::kPush, 1, b), grads_.data() + b * 256);
  }
  Send(Header(FrameType::kPull, 1, 0, /*step=*/1), nullptr);
  ASSERT_EQ(WaitReplies(4), 4u);
  for (const Reply& r : TakeReplies()) {
    EXPECT_EQ(r.header.type, FrameType::kParams) << r.error;
    EXPECT_EQ(r.header.step, 1);
  }
  for (int64_t i = 0; i < kParams; ++i) ASSERT_EQ(received_[i], params_[i] - 0.125f) << i;
  const v1::ShardStats st = StatsNow();
  EXPECT_EQ(st.step(), 1);
  EXPECT_GE(st.rejected_frames(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, BadInputTest, ::testing::Values("inproc", "process"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessel
