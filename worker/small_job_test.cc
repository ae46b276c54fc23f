// A job smaller than one alignment unit per server (Layout's 64 elements) on
// 3 shard servers: shards 1 and 2 own no element (core/layout.h). Such a job
// (a parameter group of biases, a 0-d scale) must train, change settings
// between steps, checkpoint, serialize and load like any other: the servers
// without elements take no part in the steps, and shard 0 writes their parts
// of each checkpoint.
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kServers = 3;
constexpr int kSteps = 5;
const std::vector<TensorDesc> kTensors = {{"norm.bias", {11}}, {"scale", {1}}};
constexpr size_t kParams = 12;

float Grad(int rank, int64_t step, size_t i) {
  return 0.01f * static_cast<float>(i + 1) - 0.003f * static_cast<float>(rank + step);
}

OptimizerParams LrAt(int64_t step) {
  OptimizerParams p = TestAdam();
  p.lr = 1e-3f * static_cast<float>(step + 1);  // a schedule: new settings every step
  return p;
}

// One process on the mean gradient, `steps` steps, with the same schedule
// (`schedule`) or at LrAt(0) throughout.
std::vector<float> Reference(int64_t steps = kSteps, bool schedule = true) {
  std::vector<float> params = SineInit(kParams);
  OptimizerParams opt = LrAt(0);
  std::vector<std::vector<float>> slots(StateSlots(opt), std::vector<float>(kParams));
  float* state[kMaxStateSlots] = {};
  for (size_t k = 0; k < slots.size(); ++k) state[k] = slots[k].data();
  InitState(opt, state, kParams);
  std::vector<std::vector<float>> grads(kWorld, std::vector<float>(kParams));
  std::vector<float> mean(kParams);
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<const float*> srcs;
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < kParams; ++i) grads[r][i] = Grad(r, s, i);
      srcs.push_back(grads[r].data());
    }
    ReduceMean(srcs.data(), kWorld, mean.data(), kParams);
    ApplyUpdate(LrAt(schedule ? s : 0), s + 1, params.data(), mean.data(), state, kParams);
  }
  return params;
}

class SmallJobTest : public ::testing::TestWithParam<Strategy> {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.servers = kServers;
    options.checkpoint_dir =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", StrategyName(GetParam()));
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override { cluster_->Stop(); }

  std::unique_ptr<InProcCluster> cluster_;
};

TEST_P(SmallJobTest, ServersWithoutElementsFollowTheStep) {
  const std::string job = absl::StrCat("small-", StrategyName(GetParam()));
  const std::vector<float> want = Reference();
  std::vector<std::vector<float>> out(kWorld);
  std::vector<std::string> blobs(kWorld);
  OnRanks(kWorld, [&](int r) {
    WorkerOptions o = cluster_->worker_options(job, r, kWorld);
    o.strategy = GetParam();
    o.optimizer = LrAt(0);
    if (GetParam() == Strategy::kFsdp) o.fsdp_units = {0, 1};  // one unit per tensor
    const bool zero = GetParam() != Strategy::kDdp;            // checkpoints: ZeRO and fsdp only
    if (zero) o.checkpoint.every_steps = 2;
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    absl::Status registered = worker.RegisterLayout(kTensors, SineInit(kParams));
    ASSERT_TRUE(registered.ok()) << registered;
    for (int64_t s = 0; s < kSteps; ++s) {
      if (s > 0) {
        ASSERT_TRUE(worker.SetOptimizer(LrAt(s)).ok()) << "step " << s;
      }
      if (GetParam() == Strategy::kFsdp) {
        for (int u = 0; u < worker.num_units(); ++u) {
          ASSERT_TRUE(worker.Gather(u).ok());
          absl::Span<float> g = worker.UnitGrads(u);
          const Range range = worker.unit_range(u);
          for (size_t i = 0; i < g.size(); ++i) {
            g[i] = Grad(r, s, static_cast<size_t>(range.begin) + i);
          }
          worker.Release(u);
          ASSERT_TRUE(worker.PushUnit(u).ok());
        }
        ASSERT_TRUE(worker.FinishStep().ok()) << "step " << s;
      } else {
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(r, s, i);
        ASSERT_TRUE(worker.Step().ok()) << "step " << s;
      }
    }
    EXPECT_EQ(worker.step(), kSteps);
    // The shards holding elements are at the job's step; the others have none.
    auto sync = worker.SynchronizeOptimizerState();
    ASSERT_TRUE(sync.ok()) << sync.status();
    EXPECT_TRUE(sync->consistent);
    auto all = worker.GatherAll();
    ASSERT_TRUE(all.ok()) << all.status();
    out[r] = *all;
    auto blob = worker.Serialize();
    ASSERT_TRUE(blob.ok()) << blob.status();
    blobs[r] = *blob;
    if (zero) {
      // Written in the background: every shard's part, shard 0's for the
      // shards without elements.
      absl::Status complete = AwaitCompleteCheckpoint(worker, 4);
      EXPECT_TRUE(complete.ok()) << complete;
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(out[r].size(), kParams);
    for (size_t i = 0; i < kParams; ++i) EXPECT_EQ(out[r][i], want[i]) << "rank " << r << " " << i;
  }

  // The state loads into a new job on the same servers, which goes on.
  OnRanks(kWorld, [&](int r) {
    WorkerOptions o = cluster_->worker_options(job + "-loaded", r, kWorld);
    o.strategy = GetParam();
    o.optimizer = LrAt(kSteps);
    if (GetParam() == Strategy::kFsdp) o.fsdp_units = {0, 1};
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->RegisterLayout(kTensors, SineInit(kParams)).ok());
    absl::Status loaded = (*w)->Deserialize(blobs[r]);
    ASSERT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ((*w)->step(), kSteps);
    ASSERT_TRUE((*w)->SetOptimizer(LrAt(kSteps)).ok());
    auto all = (*w)->GatherAll();
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, out[r]);
  });
}

// A shard server restarts after the checkpoint of step 2. Shard 0 holds the
// elements: the job rolls back to that checkpoint (recovery) and goes on.
// Shard 2 holds none and takes no part in the steps: training is not
// interrupted (nothing to roll back; shard 0 writes its checkpoint parts).
// Either way every rank ends bitwise equal to 6 clean steps.
class SmallJobRecoveryTest : public ::testing::TestWithParam<int> {};

TEST_P(SmallJobRecoveryTest, RollsBackToTheCheckpoint) {
  InProcCluster::Options options;
  options.servers = kServers;
  options.checkpoint_dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/recover-", GetParam());
  InProcCluster cluster(options);
  ASSERT_TRUE(cluster.Start().ok());
  const RestartRun run = TrainThroughAServerRestart(
      kWorld,
      [&](int r) {
        WorkerOptions o = cluster.worker_options("small-recover", r, kWorld);
        o.strategy = Strategy::kZero2;
        o.optimizer = LrAt(0);
        return o;
      },
      kTensors, SineInit(kParams), [](int r, int64_t s, size_t i, float) { return Grad(r, s, i); },
      [&] { return cluster.RestartServer(GetParam()); });
  const std::vector<float> want = Reference(6, /*schedule=*/false);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(run.recoveries[r], GetParam() == 0 ? 1 : 0) << "rank " << r;
    EXPECT_EQ(run.params[r], want) << "rank " << r;
  }
  cluster.Stop();
}

INSTANTIATE_TEST_SUITE_P(RestartedShard, SmallJobRecoveryTest, ::testing::Values(0, 2));

INSTANTIATE_TEST_SUITE_P(Strategies, SmallJobTest,
                         ::testing::Values(Strategy::kZero2, Strategy::kZero1, Strategy::kFsdp,
                                           Strategy::kDdp),
                         [](const auto& info) { return std::string(StrategyName(info.param)); });

}  // namespace
}  // namespace tessel
