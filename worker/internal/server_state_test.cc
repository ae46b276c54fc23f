// ReadServerState / WriteServerState against real shard servers in the test
// process (testing/inproc_cluster.h): the state written (parameters and
// every optimizer slot, each shard its own range, committed together) is
// the state read back at its step; DDP servers take only the step; a read
// at a step the servers are not at fails naming the call.
#include "worker/internal/server_state.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "worker/internal/cluster_fixture.h"
#include "worker/internal/convert.h"
#include "worker/internal/job_context.h"
#include "worker/internal/job_control.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kEpoch = 4;

class ServerStateTest : public ClusterTest {
 protected:
  // A job of `strategy` with Adam (two state slots) over 300 floats, created
  // on both shards at kEpoch.
  std::unique_ptr<JobContext> Job(const std::string& name, Strategy strategy) {
    WorkerOptions o = cluster_->worker_options(name, 0, 1);
    o.strategy = strategy;
    o.optimizer.kind = OptimizerParams::Kind::kAdam;
    o.align_elems = 4;
    auto ctx = std::make_unique<JobContext>(o);
    ctx->epoch = kEpoch;
    v1::CreateJobRequest req;
    *req.mutable_spec() = MakeJobSpec(o, 1, {{"a", {100}}, {"b", {200}}}, 2);
    auto layout = ValidateJobSpec(req.spec());
    EXPECT_TRUE(layout.ok()) << layout.status();
    ctx->layout = std::make_unique<Layout>(std::move(*layout));
    req.set_epoch(kEpoch);
    req.set_restore_step(-1);
    JobControl control(ctx.get(), &fleet_);
    absl::Status created = control.CreateJob(req, "CreateJob", nullptr);
    EXPECT_TRUE(created.ok()) << created;
    return ctx;
  }
  TrainState State(const JobContext& ctx, int64_t step) {
    const size_t n = static_cast<size_t>(ctx.layout->num_params());
    TrainState state;
    state.step = step;
    for (size_t i = 0; i < n; ++i) state.params.push_back(0.5f * static_cast<float>(i));
    const int slots = StateSlots(ctx.options.optimizer);
    for (int k = 0; k < slots; ++k) {
      state.state.emplace_back(n);
      for (size_t i = 0; i < n; ++i) state.state.back()[i] = 1000.f * (k + 1) + i;
    }
    return state;
  }
};

TEST_F(ServerStateTest, WhatIsWrittenIsReadBackAtItsStep) {
  auto ctx = Job("state", Strategy::kZero1);
  const TrainState written = State(*ctx, 3);
  ASSERT_EQ(written.state.size(), 2u);
  absl::Status wrote = WriteServerState(*ctx, fleet_, written);
  ASSERT_TRUE(wrote.ok()) << wrote;

  ctx->step = 3;
  TrainState read;
  read.params.assign(written.params.size(), -1.f);
  read.state.assign(2, std::vector<float>(written.params.size(), -1.f));
  absl::Status s = ReadServerState(*ctx, fleet_, &read);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(read.params, written.params);
  EXPECT_EQ(read.state, written.state);
  EXPECT_TRUE(read.tensor_skips.empty());

  ctx->step = 2;  // not where the servers are
  s = ReadServerState(*ctx, fleet_, &read);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("ReadState"));
}

TEST_F(ServerStateTest, DdpServersTakeOnlyTheStep) {
  auto ctx = Job("ddp-state", Strategy::kDdp);
  TrainState at;
  at.step = 5;
  absl::Status wrote = WriteServerState(*ctx, fleet_, at);
  ASSERT_TRUE(wrote.ok()) << wrote;
  JobControl control(ctx.get(), &fleet_);
  auto stats = control.Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const v1::ShardStats& st : *stats) EXPECT_EQ(st.step(), 5);
}

}  // namespace
}  // namespace tessel::internal
