// FsdpUnits against a scripted shard server (scripted_server.h): the unit
// state machine (every transition the table allows, none it does not), a
// gather from PULL to PARAMS to release, PARAMS that must not land (another
// step or epoch, a wrong size, a unit not gathering), a prefetch that does
// not pull twice, a recovery's Reset and Retire, pushes from the unit's
// gradient buffer, and the barrier.
#include "worker/internal/fsdp_units.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"
#include "worker/internal/scripted_server.h"

namespace tessel::internal {
namespace {

constexpr int64_t kEpoch = 5;
constexpr UnitState kStates[] = {UnitState::kReleased, UnitState::kGathering, UnitState::kGathered};

TEST(UnitStateTest, OnlyTheTablesTransitionsAreAllowed) {
  using S = UnitState;
  for (S from : kStates) {
    for (S to : kStates) {
      const bool want = (from == S::kReleased && to == S::kGathering) ||
                        (from == S::kGathering && to == S::kGathered) ||
                        (from == S::kGathering && to == S::kReleased) ||
                        (from == S::kGathered && to == S::kReleased);
      absl::Status s = CheckUnitTransition(from, to);
      EXPECT_EQ(s.ok(), want) << UnitStateName(from) << " -> " << UnitStateName(to);
      if (!want) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
        EXPECT_NE(s.message().find(UnitStateName(from)), std::string::npos) << s;
        EXPECT_NE(s.message().find(UnitStateName(to)), std::string::npos) << s;
      }
    }
  }
}

class FsdpUnitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerOptions o;
    o.job = "f";
    o.strategy = Strategy::kFsdp;
    o.fsdp_units = {0, 2};  // unit 0: a, b (buckets 0, 1); unit 1: c (bucket 2)
    ctx_ = DataPathContext(o, kEpoch, {{"a", {40}}, {"b", {40}}, {"c", {20}}}, 1, 40);
    channel_ = std::make_unique<DataChannel>(ctx_.get(), InProcTransport::Create(fabric_));
    ASSERT_TRUE(ConnectChannel(channel_.get(), {&server_}).ok());
    units_ = std::make_unique<FsdpUnits>(ctx_.get(), channel_.get());
    channel_->SetSink(units_.get());
    ASSERT_TRUE(units_->Init().ok());
  }
  void TearDown() override { channel_.reset(); }

  // Answers the `n`-th frame the server got (a PULL of unit 0 at `step`)
  // with the unit's two buckets, of value v and v + 1.
  void AnswerUnit0(size_t n, int64_t step, float v) {
    const ScriptedServer::Frame pull = server_.Await(n + 1).at(n);
    ASSERT_EQ(pull.header.type, FrameType::kPull);
    ASSERT_EQ(pull.header.step, step);
    ASSERT_EQ(pull.header.bucket, 0);
    ASSERT_EQ(pull.header.bucket_count, 2u);
    server_.Reply(pull.from, ParamsHeader(*ctx_, 0, 0, step, 160), FloatBytes(40, v));
    server_.Reply(pull.from, ParamsHeader(*ctx_, 0, 1, step, 160), FloatBytes(40, v + 1));
  }

  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  ScriptedServer server_{fabric_};
  std::unique_ptr<JobContext> ctx_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<FsdpUnits> units_;
};

TEST_F(FsdpUnitsTest, AGatherGoesFromReleasedThroughGatheringToGatheredAndBack) {
  ASSERT_EQ(units_->size(), 2);
  EXPECT_EQ(units_->range(0).size(), 80);
  EXPECT_EQ(units_->state(0), UnitState::kReleased);
  ASSERT_TRUE(units_->Prefetch(0).ok());
  EXPECT_EQ(units_->state(0), UnitState::kGathering);
  int64_t params = 0, grads = 0, peak_grads = 0;
  EXPECT_GE(units_->AddHeldBytes(&params, &grads, &peak_grads), 80 * 4);
  EXPECT_EQ(params, 80 * 4);
  EXPECT_EQ(grads, 0);

  std::thread answer([&] { AnswerUnit0(0, 0, 1.f); });
  auto p = units_->Gather(0);
  answer.join();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(units_->state(0), UnitState::kGathered);
  ASSERT_EQ(p->size(), 80u);
  for (size_t i = 0; i < p->size(); ++i) ASSERT_EQ((*p)[i], i < 40 ? 1.f : 2.f) << i;

  units_->Release(0);
  EXPECT_EQ(units_->state(0), UnitState::kReleased);
  params = 0;
  units_->AddHeldBytes(&params, &grads, &peak_grads);
  EXPECT_EQ(params, 0);
  units_->Release(0);  // released: a no-op
  EXPECT_EQ(units_->state(0), UnitState::kReleased);
  EXPECT_EQ(units_->Prefetch(2).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FsdpUnitsTest, ParamsOfAnotherStepEpochSizeOrUnitNeverLand) {
  ASSERT_TRUE(units_->Prefetch(0).ok());
  const PeerId worker = server_.Await(1).at(0).from;
  server_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 9.f));  // step
  FrameHeader old = ParamsHeader(*ctx_, 0, 0, 0, 160);
  old.epoch = kEpoch - 1;
  server_.Reply(worker, old, FloatBytes(40, 9.f));                               // epoch
  server_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 0, 80), FloatBytes(20, 9.f));  // size
  server_.Reply(worker, ParamsHeader(*ctx_, 0, 2, 0, 80), FloatBytes(20, 9.f));  // unit 1
  ASSERT_TRUE(channel_
                  ->WaitFor([&] { return channel_->stale_dropped() == 4; },
                            [] { return "four stale frames"; })
                  .ok());
  EXPECT_EQ(units_->state(0), UnitState::kGathering);
  EXPECT_EQ(units_->state(1), UnitState::kReleased);
  AnswerUnit0(0, 0, 3.f);
  auto p = units_->Gather(0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)[0], 3.f);
  // Gathered: a second copy of a bucket is stale too.
  server_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 0, 160), FloatBytes(40, 9.f));
  ASSERT_TRUE(channel_
                  ->WaitFor([&] { return channel_->stale_dropped() == 5; },
                            [] { return "a fifth stale frame"; })
                  .ok());
  EXPECT_EQ((*p)[0], 3.f);
}

TEST_F(FsdpUnitsTest, APrefetchPullsOncePerStepAndAnOlderGatherIsReleasedFirst) {
  ASSERT_TRUE(units_->Prefetch(0).ok());
  ASSERT_TRUE(units_->Prefetch(0).ok());  // in flight: no second pull
  std::thread answer([&] { AnswerUnit0(0, 0, 1.f); });
  ASSERT_TRUE(units_->Gather(0).ok());
  answer.join();
  EXPECT_EQ(server_.Await(1).size(), 1u);

  ctx_->step = 1;  // held for step 0: released, then pulled for step 1
  std::thread again([&] { AnswerUnit0(1, 1, 5.f); });
  auto p = units_->Gather(0);
  again.join();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)[0], 5.f);
  EXPECT_EQ((*p)[79], 6.f);
}

TEST_F(FsdpUnitsTest, AResetReleasesEveryUnitAndRetireKeepsWhatMayStillBeWritten) {
  ASSERT_TRUE(units_->Prefetch(0).ok());  // gathering: never answered
  ASSERT_TRUE(units_->Grads(1).size() == 20u);
  units_->Reset();
  EXPECT_EQ(units_->state(0), UnitState::kReleased);
  int64_t params = 0, grads = 0, peak_grads = 0;
  units_->AddHeldBytes(&params, &grads, &peak_grads);
  EXPECT_EQ(grads, 0);
  EXPECT_EQ(peak_grads, 20 * 4);
  // PARAMS of the gather the reset dropped do not land.
  const PeerId worker = server_.Await(1).at(0).from;
  server_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 0, 160), FloatBytes(40, 9.f));
  ASSERT_TRUE(channel_
                  ->WaitFor([&] { return channel_->stale_dropped() == 1; },
                            [] { return "the stale frame"; })
                  .ok());
  std::vector<std::vector<float>> retired;
  std::vector<std::vector<uint16_t>> retired_half;
  units_->Retire(/*stuck=*/true, &retired, &retired_half);
  ASSERT_EQ(retired.size(), 1u);  // the buffer the pull was landing in
  EXPECT_EQ(retired[0].size(), 80u);
  units_->Retire(/*stuck=*/true, &retired, &retired_half);
  EXPECT_EQ(retired.size(), 1u);  // nothing parked any more
}

TEST_F(FsdpUnitsTest, APushSendsEachBucketFromTheUnitsBufferAndFreesIt) {
  absl::Status none = units_->Push(0, [](int, int) {});
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition) << none;
  absl::Span<float> g = units_->Grads(0);
  ASSERT_EQ(g.size(), 80u);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  std::vector<std::pair<int, int>> told;
  ASSERT_TRUE(units_->Push(0, [&](int s, int b) { told.emplace_back(s, b); }).ok());
  EXPECT_EQ(told, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}}));
  auto frames = server_.Await(2);
  ASSERT_EQ(frames.size(), 2u);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(frames[b].header.type, FrameType::kPush);
    EXPECT_EQ(frames[b].header.bucket, b);
    ASSERT_EQ(frames[b].payload.size(), 160u);
    float first = 0;
    std::memcpy(&first, frames[b].payload.data(), sizeof(first));
    EXPECT_EQ(first, 40.f * b);
  }
  int64_t params = 0, grads = 0, peak_grads = 0;
  units_->AddHeldBytes(&params, &grads, &peak_grads);
  EXPECT_EQ(grads, 0);
  EXPECT_EQ(units_->Push(0, [](int, int) {}).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FsdpUnitsTest, ABarrierReturnsOnceEveryShardReportsTheStep) {
  std::thread answer([&] {
    const ScriptedServer::Frame pull = server_.Await(1).at(0);
    EXPECT_EQ(pull.header.type, FrameType::kPull);
    EXPECT_EQ(pull.header.step, 3);
    FrameHeader other = ParamsHeader(*ctx_, 0, 0, 2, 0);  // another step: not counted
    server_.Reply(pull.from, other, {});
    server_.Reply(pull.from, ParamsHeader(*ctx_, 0, 0, 3, 0), {});
  });
  EXPECT_TRUE(units_->Barrier(3).ok());
  answer.join();
}

}  // namespace
}  // namespace tessel::internal
