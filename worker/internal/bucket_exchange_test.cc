// DataChannel + BucketExchange against a scripted shard server: a bare
// in-process endpoint that answers frames as this test decides. The
// contract: PARAMS of the step and epoch pulled land in the buffer and end
// the wait; stale, mis-sized or unknown frames never land and are counted;
// an ERROR of the current epoch ends the wait with its code (recoverable
// when recovery is on), one of an older epoch is ignored.
#include "worker/internal/bucket_exchange.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {
namespace {

constexpr int64_t kEpoch = 7;

// Records every frame it gets, with the sender, for the test to answer.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::shared_ptr<InProcFabric> fabric)
      : transport_(InProcTransport::Create(std::move(fabric))) {
    transport_->SetHandler([this](const Incoming& in) {
      auto h = DecodeHeader(in.header.data(), in.header.size());
      absl::MutexLock lock(&mu_);
      if (h.ok()) frames_.push_back({*h, in.from});
      sink_.resize(in.payload_bytes);
      return Accept{sink_.data(), [](absl::Status) {}};
    });
  }
  ~ScriptedServer() { transport_->Shutdown(); }
  std::string address() const { return transport_->address(); }

  // Waits for `n` frames; returns them.
  std::vector<std::pair<FrameHeader, PeerId>> Await(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return frames_.size() >= n; };
    mu_.Await(absl::Condition(&enough));
    return frames_;
  }
  // Sends `h` with `payload` back to `to`.
  void Reply(PeerId to, const FrameHeader& h, std::vector<uint8_t> payload) {
    auto owned = std::make_shared<std::vector<uint8_t>>(std::move(payload));
    const HeaderBytes bytes = EncodeHeader(h);
    transport_->Send(to, absl::MakeConstSpan(bytes), owned->data(), owned->size(),
                     [owned](absl::Status) {});
  }

 private:
  std::unique_ptr<InProcTransport> transport_;
  absl::Mutex mu_;
  std::vector<std::pair<FrameHeader, PeerId>> frames_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> sink_ ABSL_GUARDED_BY(mu_);
};

class BucketExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerOptions o;
    o.job = "j";
    o.strategy = Strategy::kZero1;
    o.recovery = true;
    o.step_timeout = absl::Seconds(2);
    ctx_ = std::make_unique<JobContext>(o);
    ctx_->epoch = kEpoch;
    auto layout = Layout::Create({{"w", {100}}}, 1, 4, 40);  // buckets of 40, 40, 20
    ASSERT_TRUE(layout.ok()) << layout.status();
    ctx_->layout = std::make_unique<Layout>(std::move(*layout));
    server_ = std::make_unique<ScriptedServer>(fabric_);
    channel_ = std::make_unique<DataChannel>(ctx_.get(), InProcTransport::Create(fabric_));
    channel_->SetShards(1);
    channel_->SetAddress(0, "scripted");
    auto peer = channel_->transport().Connect(server_->address());
    ASSERT_TRUE(peer.ok());
    channel_->SetPeer(0, *peer);
    exchange_ = std::make_unique<BucketExchange>(ctx_.get(), channel_.get());
    channel_->SetSink(exchange_.get());
    exchange_->Allocate();
  }

  // The server first (nothing more arrives), then the channel (its transport
  // stops), then the exchange the channel delivered into.
  void TearDown() override {
    server_.reset();
    channel_.reset();
  }

  FrameHeader Params(int bucket, int64_t step, int64_t epoch, uint64_t bytes) {
    FrameHeader h;
    h.type = FrameType::kParams;
    h.job_id = ctx_->job_id;
    h.epoch = epoch;
    h.step = step;
    h.shard = 0;
    h.bucket = bucket;
    h.payload_bytes = bytes;
    return h;
  }
  static std::vector<uint8_t> Floats(size_t n, float v) {
    std::vector<float> f(n, v);
    std::vector<uint8_t> b(n * 4);
    std::memcpy(b.data(), f.data(), b.size());
    return b;
  }

  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  std::unique_ptr<JobContext> ctx_;
  std::unique_ptr<ScriptedServer> server_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<BucketExchange> exchange_;
};

TEST_F(BucketExchangeTest, PushesEveryBucketOnceAndLandsOnlyTheStepsParams) {
  for (size_t i = 0; i < exchange_->buffers().grads.size(); ++i) {
    exchange_->buffers().grads[i] = static_cast<float>(i);
  }
  // The first 40 elements are final: bucket 0 goes now, the rest at the step.
  ASSERT_TRUE(exchange_->GradientsReady(0, 40).ok());
  EXPECT_EQ(exchange_->unpushed(), 2);
  std::thread answer([&] {
    // PUSH 0, then PULL (bucket_count 3), then PUSH 1 and 2.
    auto frames = server_->Await(4);
    const PeerId worker = frames[0].second;
    EXPECT_EQ(frames[0].first.type, FrameType::kPush);
    EXPECT_EQ(frames[0].first.bucket, 0);
    EXPECT_EQ(frames[0].first.epoch, kEpoch);
    EXPECT_EQ(frames[0].first.payload_bytes, 160u);
    EXPECT_EQ(frames[1].first.type, FrameType::kPull);
    EXPECT_EQ(frames[1].first.step, 1);
    EXPECT_EQ(frames[1].first.bucket_count, 3u);
    // Refused, each counted as stale: another step, another epoch, wrong size.
    server_->Reply(worker, Params(0, 2, kEpoch, 160), Floats(40, 9.f));
    server_->Reply(worker, Params(0, 1, kEpoch - 1, 160), Floats(40, 9.f));
    server_->Reply(worker, Params(0, 1, kEpoch, 156), Floats(39, 9.f));
    // Dropped before any sink: a bucket the layout does not have.
    server_->Reply(worker, Params(3, 1, kEpoch, 160), Floats(40, 9.f));
    for (int b = 0; b < 3; ++b) {
      server_->Reply(worker, Params(b, 1, kEpoch, b == 2 ? 80 : 160),
                     Floats(b == 2 ? 20 : 40, 1.f + b));
    }
  });
  ASSERT_TRUE(exchange_->Exchange(1).ok());
  answer.join();
  const PayloadVector<float>& p = exchange_->buffers().params;
  for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], 1.f + static_cast<float>(i / 40)) << i;
  EXPECT_EQ(channel_->stale_dropped(), 3);
  EXPECT_EQ(exchange_->unpushed(), 0);
  exchange_->NextStep();
  EXPECT_EQ(exchange_->unpushed(), 3);
  // A bucket handed over twice is an error that names it.
  ASSERT_TRUE(exchange_->GradientsReady(0, 40).ok());
  absl::Status twice = exchange_->GradientsReady(0, 10);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("bucket 0 of shard 0 were handed over twice"), std::string::npos);
}

TEST_F(BucketExchangeTest, AnErrorOfThisEpochEndsTheWaitAndOneOfAnOlderEpochDoesNot) {
  std::thread answer([&] {
    auto frames = server_->Await(1);  // the PULL
    const PeerId worker = frames[0].second;
    FrameHeader old = Params(0, 1, kEpoch - 1, 0);
    old.type = FrameType::kError;
    old.code = static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
    const std::string text = "an old refusal";
    server_->Reply(worker, old, std::vector<uint8_t>(text.begin(), text.end()));
    FrameHeader now = old;
    now.epoch = kEpoch;
    now.code = static_cast<int32_t>(absl::StatusCode::kNotFound);
    const std::string why = "no such job on this server";
    server_->Reply(worker, now, std::vector<uint8_t>(why.begin(), why.end()));
  });
  absl::Status s = exchange_->Pull(1);
  answer.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("no such job on this server"), std::string::npos) << s;
  EXPECT_TRUE(IsRecoverable(s));
  EXPECT_EQ(channel_->stale_dropped(), 1);
}

TEST_F(BucketExchangeTest, AWaitWithNoAnswerEndsAtTheStepDeadlineNamingWhatIsMissing) {
  absl::Status s = exchange_->Pull(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("parameters of step 1 (missing shard 0 (scripted): 0/3 buckets)"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace tessel::internal
