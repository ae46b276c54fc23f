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

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"
#include "worker/internal/scripted_server.h"

namespace tessel::internal {
namespace {

constexpr int64_t kEpoch = 7;

class BucketExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerOptions o;
    o.job = "j";
    o.strategy = Strategy::kZero1;
    ctx_ = DataPathContext(o, kEpoch, {{"w", {100}}}, 1, 40);  // buckets of 40, 40, 20
    server_ = std::make_unique<ScriptedServer>(fabric_);
    channel_ = std::make_unique<DataChannel>(ctx_.get(), InProcTransport::Create(fabric_));
    ASSERT_TRUE(ConnectChannel(channel_.get(), {server_.get()}).ok());
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
    FrameHeader h = ParamsHeader(*ctx_, 0, bucket, step, bytes);
    h.epoch = epoch;
    return h;
  }
  static std::vector<uint8_t> Floats(size_t n, float v) { return FloatBytes(n, v); }

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
    const PeerId worker = frames[0].from;
    EXPECT_EQ(frames[0].header.type, FrameType::kPush);
    EXPECT_EQ(frames[0].header.bucket, 0);
    EXPECT_EQ(frames[0].header.epoch, kEpoch);
    EXPECT_EQ(frames[0].header.payload_bytes, 160u);
    EXPECT_EQ(frames[1].header.type, FrameType::kPull);
    EXPECT_EQ(frames[1].header.step, 1);
    EXPECT_EQ(frames[1].header.bucket_count, 3u);
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
    const PeerId worker = frames[0].from;
    FrameHeader old = Params(0, 1, kEpoch - 1, 0);
    old.type = FrameType::kError;
    old.code = static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
    const std::string text = "an old refusal";
    old.payload_bytes = text.size();  // as servers write it
    server_->Reply(worker, old, std::vector<uint8_t>(text.begin(), text.end()));
    FrameHeader now = old;
    now.epoch = kEpoch;
    now.code = static_cast<int32_t>(absl::StatusCode::kNotFound);
    const std::string why = "no such job on this server";
    now.payload_bytes = why.size();
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
  EXPECT_NE(s.message().find(absl::StrCat("parameters of step 1 (missing shard 0 (",
                                          server_->address(), "): 0/3 buckets)")),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace tessel::internal
