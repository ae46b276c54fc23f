// HostAggregator with two ranks of one host, each over its own in-process
// endpoint, and a scripted shard server (scripted_server.h): they meet,
// each sums the buckets it aggregates from both ranks' gradients in rank
// order and pushes the sum once, pulls wait for the other member's
// announcement, and pushes that must not be summed (another epoch, a
// bucket the rank does not aggregate, a second one for the step) are
// dropped and counted.
#include "worker/internal/host_aggregator.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"
#include "worker/internal/scripted_server.h"

namespace tessel::internal {
namespace {

constexpr int64_t kEpoch = 2;

// Hands the channel's worker PUSH frames to the aggregator.
class AggregatorSink : public FrameSink {
 public:
  explicit AggregatorSink(HostAggregator* aggregator) : aggregator_(aggregator) {}
  Accept OnParams(const FrameHeader&) override { return Accept{}; }
  Accept OnPush(const FrameHeader& h, const Incoming& in) override {
    return aggregator_->OnPush(h, in);
  }

 private:
  HostAggregator* const aggregator_;
};

// One rank of the host: its context, channel, aggregator and gradients.
struct HostRank {
  HostRank(int rank, const std::shared_ptr<InProcFabric>& fabric, ScriptedServer* shard) {
    WorkerOptions o;
    o.job = "host";
    o.rank = rank;
    o.world_size = 2;
    ctx = DataPathContext(o, kEpoch, {{"w", {80}}}, 1, 40);  // buckets 0 and 1 of 40
    ctx->options.step_timeout = absl::Seconds(5);
    ctx->rank_groups = {0, 0};
    channel = std::make_unique<DataChannel>(ctx.get(), InProcTransport::Create(fabric));
    EXPECT_TRUE(ConnectChannel(channel.get(), {shard}).ok());
    aggregator = std::make_unique<HostAggregator>(ctx.get(), channel.get());
    sink = std::make_unique<AggregatorSink>(aggregator.get());
    channel->SetSink(sink.get());
    grads.assign(80, 0.f);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.5f * static_cast<float>(i) + rank;
  }
  ~HostRank() { channel.reset(); }

  // Both ranks' gradients of this step handed over: its own buckets to
  // itself, the other's pushed there.
  void HandOver() {
    for (int b = 0; b < 2; ++b) {
      const float* src = grads.data() + 40 * b;
      const int to = aggregator->AggregatorOf(0, b);
      if (to == ctx->rank.load()) {
        aggregator->OwnReady(0, b, src);
      } else {
        channel->SendToWorker(to, channel->Header(FrameType::kPush, ctx->step, 0, b), src);
      }
    }
  }

  std::unique_ptr<JobContext> ctx;
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<HostAggregator> aggregator;
  std::unique_ptr<AggregatorSink> sink;
  std::vector<float> grads;
};

class HostAggregatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 2; ++r) ranks_.push_back(std::make_unique<HostRank>(r, fabric_, &shard_));
    // Each rank's endpoint to the other, by data-parallel rank.
    for (int r = 0; r < 2; ++r) {
      std::vector<PeerId> peers(2, DataChannel::kNoPeer);
      auto peer =
          ranks_[r]->channel->transport().Connect(ranks_[1 - r]->channel->transport().address());
      ASSERT_TRUE(peer.ok());
      peers[static_cast<size_t>(1 - r)] = *peer;
      ranks_[r]->channel->SetWorkerPeers(peers);
      ranks_[r]->aggregator->Configure(ranks_[r]->ctx->rank_groups);
    }
  }
  void TearDown() override { ranks_.clear(); }

  // Both ranks at once.
  std::vector<absl::Status> OnBoth(const std::function<absl::Status(HostRank&)>& f) {
    std::vector<absl::Status> out(2);
    std::thread other([&] { out[1] = f(*ranks_[1]); });
    out[0] = f(*ranks_[0]);
    other.join();
    return out;
  }

  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  ScriptedServer shard_{fabric_};
  std::vector<std::unique_ptr<HostRank>> ranks_;
};

TEST_F(HostAggregatorTest, EachBucketIsSummedInRankOrderAndPushedOnce) {
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ranks_[r]->aggregator->active());
    EXPECT_EQ(ranks_[r]->aggregator->members(), (std::vector<int>{0, 1}));
  }
  // Rank 0 sums bucket 0, rank 1 bucket 1; each pulls its own run.
  EXPECT_TRUE(ranks_[0]->aggregator->Aggregates(0, 0));
  EXPECT_TRUE(ranks_[1]->aggregator->Aggregates(0, 1));
  int first = -1, count = -1;
  ranks_[1]->aggregator->PullRange(0, &first, &count);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(count, 1);

  for (const absl::Status& s : OnBoth([](HostRank& r) { return r.aggregator->Meet(); })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (const absl::Status& s : OnBoth([](HostRank& r) {
         r.HandOver();
         return r.aggregator->PushAll();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  auto pushes = shard_.Await(2);
  ASSERT_EQ(pushes.size(), 2u);
  for (const auto& push : pushes) {
    EXPECT_EQ(push.header.type, FrameType::kPush);
    EXPECT_EQ(push.header.epoch, kEpoch);
    const int b = push.header.bucket;
    ASSERT_EQ(push.payload.size(), 160u);
    std::vector<float> sum(40);
    std::memcpy(sum.data(), push.payload.data(), push.payload.size());
    for (int i = 0; i < 40; ++i) {
      const float want = ranks_[0]->grads[40 * b + i] + ranks_[1]->grads[40 * b + i];
      ASSERT_EQ(sum[i], want) << "bucket " << b << " element " << i;
    }
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(shard_.Await(2, absl::ZeroDuration()).size(), 2u);  // once each
}

TEST_F(HostAggregatorTest, APullWaitsForTheOtherMembersAnnouncement) {
  std::thread announce([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ranks_[1]->aggregator->AnnouncePull(4);
  });
  EXPECT_TRUE(ranks_[0]->aggregator->AwaitPulls(4).ok());
  announce.join();
  // Not announced: the wait ends at the step deadline, naming the rank.
  ranks_[0]->ctx->options.step_timeout = absl::Milliseconds(300);
  absl::Status s = ranks_[0]->aggregator->AwaitPulls(5);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("the other workers of this host (rank 1)"), std::string::npos) << s;
}

TEST_F(HostAggregatorTest, PushesThatMustNotBeSummedAreDroppedAndCounted) {
  HostRank& zero = *ranks_[0];
  HostRank& one = *ranks_[1];
  const float* src = one.grads.data();
  FrameHeader old = one.channel->Header(FrameType::kPush, 0, 0, 0);
  old.epoch = kEpoch - 1;
  one.channel->SendToWorker(0, old, src);  // another epoch
  one.channel->SendToWorker(0, one.channel->Header(FrameType::kPush, 0, 0, 1), src);  // not 0's
  one.channel->SendToWorker(0, one.channel->Header(FrameType::kPush, 0, 0, 0), src);  // taken
  one.channel->SendToWorker(0, one.channel->Header(FrameType::kPush, 0, 0, 0), src);  // second
  ASSERT_TRUE(zero.channel
                  ->WaitFor([&] { return zero.channel->stale_dropped() == 3; },
                            [] { return "three dropped pushes"; })
                  .ok());
  ASSERT_TRUE(one.channel->WaitForWorkerSends().ok());
  // The one taken is summed with rank 0's own once that is ready.
  zero.aggregator->OwnReady(0, 0, zero.grads.data());
  auto pushes = shard_.Await(1);
  ASSERT_EQ(pushes.size(), 1u);
  float first = 0;
  std::memcpy(&first, pushes[0].payload.data(), sizeof(first));
  EXPECT_EQ(first, zero.grads[0] + one.grads[0]);
}

TEST_F(HostAggregatorTest, AResetForgetsTheStepAndRetireReplacesTheSlots) {
  HostRank& zero = *ranks_[0];
  HostRank& one = *ranks_[1];
  one.channel->SendToWorker(0, one.channel->Header(FrameType::kPush, 0, 0, 0), one.grads.data());
  ASSERT_TRUE(one.channel->WaitForWorkerSends().ok());
  zero.aggregator->Reset();
  // The push before the reset is forgotten: rank 0's own gradient alone
  // does not complete the bucket.
  zero.aggregator->OwnReady(0, 0, zero.grads.data());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(shard_.Await(1, absl::ZeroDuration()).empty());
  std::vector<PayloadVector<float>> retired;
  zero.aggregator->Retire(/*stuck=*/false, &retired);
  EXPECT_TRUE(retired.empty());
  zero.aggregator->Retire(/*stuck=*/true, &retired);
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].size(), 40u);  // one other member, one bucket of 40
}

TEST(HostAggregatorFlatTest, AloneOnItsHostARankAggregatesEveryBucketItself) {
  auto fabric = std::make_shared<InProcFabric>();
  ScriptedServer shard(fabric);
  HostRank alone(0, fabric, &shard);
  alone.aggregator->Configure({});
  EXPECT_FALSE(alone.aggregator->active());
  EXPECT_TRUE(alone.aggregator->Aggregates(0, 1));
  EXPECT_TRUE(alone.aggregator->Meet().ok());
  EXPECT_TRUE(alone.aggregator->PushAll().ok());
}

}  // namespace
}  // namespace tessel::internal
