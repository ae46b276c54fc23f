// Hierarchical aggregation through the worker SDK (docs/hierarchical.md):
// four worker threads given host ids, real shard servers and a real registry
// in the test process (testing/inproc_cluster), over the in-process
// transport and over UCX. The workers of a host sum their gradients in rank
// order and push one partial sum per bucket; the servers sum the hosts in
// order and divide by W. Every run must equal single-process training that
// reduces with the same tree, bit for bit: with one host that is the flat
// mean itself.
#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 4;
const std::vector<TensorDesc> kTensors = MlpTensors(41, 13, 23);

size_t NumParams() { return NumElements(kTensors); }

std::vector<float> Init() { return SineInit(NumParams()); }

// Single-process training whose mean is the tree of `groups` (per rank; the
// ranks of a group summed in order, then the groups in order, divided by W).
std::vector<float> Reference(int steps, const std::vector<int>& groups) {
  std::vector<float> params = Init();
  const size_t n = params.size();
  OptimizerParams opt = TestAdam();
  std::vector<std::vector<float>> slots(StateSlots(opt), std::vector<float>(n));
  float* state[kMaxStateSlots] = {};
  for (size_t k = 0; k < slots.size(); ++k) state[k] = slots[k].data();
  InitState(opt, state, n);
  const int num_groups = *std::max_element(groups.begin(), groups.end()) + 1;
  std::vector<std::vector<float>> grads(kWorld, std::vector<float>(n));
  std::vector<std::vector<float>> partial(num_groups, std::vector<float>(n));
  std::vector<float> mean(n);
  for (int64_t s = 0; s < steps; ++s) {
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < n; ++i) grads[r][i] = TestGrad(r, s, i, params[i]);
    }
    std::vector<const float*> partials;
    for (int g = 0; g < num_groups; ++g) {
      std::vector<const float*> members;
      for (int r = 0; r < kWorld; ++r) {
        if (groups[r] == g) members.push_back(grads[r].data());
      }
      ReduceSum(members.data(), static_cast<int>(members.size()), partial[g].data(), n);
      partials.push_back(partial[g].data());
    }
    ReduceMean(partials.data(), num_groups, mean.data(), n, kWorld);
    ApplyUpdate(opt, s + 1, params.data(), mean.data(), state, n);
  }
  return params;
}

std::vector<int> Groups(const std::vector<std::string>& hosts) {
  std::map<std::string, int> number;
  std::vector<int> out;
  for (const std::string& h : hosts) {
    out.push_back(number.emplace(h, static_cast<int>(number.size())).first->second);
  }
  return out;
}

class HostAggregationTest : public ::testing::TestWithParam<InProcCluster::Kind> {
 protected:
  void SetUp() override { Restart(""); }
  void TearDown() override { cluster_->Stop(); }

  void Restart(const std::string& checkpoint_dir) {
    if (cluster_ != nullptr) cluster_->Stop();
    InProcCluster::Options options;
    options.servers = 2;
    options.transport = GetParam();
    options.checkpoint_dir = checkpoint_dir;
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }

  WorkerOptions Options(const std::string& job, int rank, Strategy strategy,
                        const std::vector<std::string>& hosts) {
    WorkerOptions o = cluster_->worker_options(job, rank, kWorld);
    o.strategy = strategy;
    o.optimizer = TestAdam();
    o.bucket_bytes = 1024;  // several buckets per shard, spread over a host's ranks
    o.aggregation = Aggregation::kHost;
    o.host_id = hosts[static_cast<size_t>(rank)];
    if (rank == 1) o.shuffle_seed = 17;  // pushes in a random order, with pauses
    return o;
  }

  static void OnRanks(const std::function<void(int)>& body) { tessel::OnRanks(kWorld, body); }

  struct Run {
    std::vector<float> params;     // rank 0's, the others' equal
    std::string aggregation;       // rank 0's
    int64_t pushed_per_step = -1;  // gradient bytes the servers received per step
  };

  Run Train(const std::string& job, Strategy strategy, const std::vector<std::string>& hosts) {
    std::vector<std::vector<float>> out(kWorld);
    Run run;
    OnRanks([&](int r) {
      auto w = Worker::Connect(Options(job, r, strategy, hosts));
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
      for (int64_t s = 0; s < kSteps; ++s) {
        absl::Status st = StepWithTestGrads(worker, r, s);  // some buckets handed over early
        ASSERT_TRUE(st.ok()) << st;
      }
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
      if (r == 0) {
        run.aggregation = worker.aggregation();
        auto reports = worker.ServerStats();
        ASSERT_TRUE(reports.ok()) << reports.status();
        int64_t pushed = 0;
        for (const ShardReport& rep : *reports) pushed += rep.pushed_bytes;
        run.pushed_per_step = pushed / kSteps;
      }
    });
    for (int r = 1; r < kWorld; ++r) EXPECT_EQ(out[r], out[0]) << "rank " << r << " disagrees";
    run.params = std::move(out[0]);
    return run;
  }

  std::unique_ptr<InProcCluster> cluster_;
};

TEST_P(HostAggregationTest, OneHostEqualsFlatTrainingBitwise) {
  const std::vector<std::string> hosts = {"h", "h", "h", "h"};
  const std::vector<float> want = Reference(kSteps, {0, 1, 2, 3});  // the flat mean
  for (Strategy s : {Strategy::kZero2, Strategy::kZero1, Strategy::kDdp}) {
    SCOPED_TRACE(std::string(StrategyName(s)));
    const Run run = Train(absl::StrCat("one-", StrategyName(s)), s, hosts);
    ExpectParamsEqual(run.params, want);
    EXPECT_EQ(run.aggregation, "host aggregation: 1 host (ranks 0-3)");
    // One partial sum per bucket reached the servers, not four pushes.
    EXPECT_EQ(run.pushed_per_step, static_cast<int64_t>(NumParams() * sizeof(float)));
  }
}

TEST_P(HostAggregationTest, SeveralHostsEqualTheTreeBitwise) {
  const std::vector<std::vector<std::string>> layouts = {
      {"a", "a", "b", "b"},  // two hosts of two
      {"a", "b", "a", "b"},  // interleaved ranks
      {"a", "b", "b", "b"},  // a host of one, a host of three
  };
  for (const auto& hosts : layouts) {
    const std::vector<int> groups = Groups(hosts);
    const int num_groups = *std::max_element(groups.begin(), groups.end()) + 1;
    const std::vector<float> want = Reference(kSteps, groups);
    // The tree is not the flat sum: the servers really took the groups.
    EXPECT_NE(want, Reference(kSteps, {0, 1, 2, 3}));
    for (Strategy s : {Strategy::kZero2, Strategy::kDdp}) {
      SCOPED_TRACE(absl::StrCat(StrategyName(s), " hosts ", absl::StrJoin(hosts, "")));
      const Run run =
          Train(absl::StrCat("tree-", StrategyName(s), "-", absl::StrJoin(hosts, "")), s, hosts);
      ExpectParamsEqual(run.params, want);
      EXPECT_EQ(run.pushed_per_step,
                static_cast<int64_t>(num_groups * NumParams() * sizeof(float)));
    }
  }
}

TEST_P(HostAggregationTest, JobsThatCannotAggregateStayFlatAndSaySo) {
  const std::vector<std::string> hosts = {"h", "h", "h", "h"};
  struct Case {
    Strategy strategy;
    Precision precision;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{
           {Strategy::kZero2, Precision::kBf16,
            "flat (mixed precision: a host's partial sum would need fp32 on the wire)"},
           {Strategy::kFsdp, Precision::kFp32, "flat (fsdp gathers unit by unit)"}}) {
    SCOPED_TRACE(c.why);
    std::vector<std::string> got(kWorld);
    OnRanks([&](int r) {
      WorkerOptions o =
          Options(absl::StrCat("flat-", StrategyName(c.strategy)), r, c.strategy, hosts);
      o.precision = c.precision;
      if (c.strategy == Strategy::kFsdp) o.fsdp_units = {0, 2};
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      ASSERT_TRUE((*w)->RegisterLayout(kTensors, Init()).ok());
      got[r] = (*w)->aggregation();
    });
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(got[r], c.why) << "rank " << r;
  }
}

// A shard server restarts mid-run: every worker recovers to the checkpoint
// of step 2, takes the groups again and trains on to the tree's bits.
TEST_P(HostAggregationTest, ARestartedShardServerIsRecoveredFromWithTheGroups) {
  Restart(absl::StrCat(::testing::TempDir(), "/hier-ckpt-", InProcCluster::KindName(GetParam())));
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  const RestartRun run = TrainThroughAServerRestart(
      kWorld, [&](int r) { return Options("hier-recover", r, Strategy::kZero2, hosts); }, kTensors,
      Init(), TestGrad, [&] { return cluster_->RestartServer(1); },
      [](Worker& worker) {
        EXPECT_EQ(worker.aggregation(), "host aggregation: 2 hosts (ranks 0-1; 2-3)");
      });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(run.recoveries[r], 1) << "rank " << r;
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(run.params[r], run.params[0]) << "rank " << r;
  ExpectParamsEqual(run.params[0], Reference(6, Groups(hosts)));
}

INSTANTIATE_TEST_SUITE_P(Transports, HostAggregationTest,
                         ::testing::Values(InProcCluster::Kind::kInProc, InProcCluster::Kind::kUcx,
                                           InProcCluster::Kind::kUcxCopied,
                                           InProcCluster::Kind::kUcxRma),
                         [](const auto& info) { return InProcCluster::KindName(info.param); });

}  // namespace
}  // namespace tessel
