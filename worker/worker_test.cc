// The worker SDK's unit tests: one suite, run over the in-process transport
// (the seeds' InMemoryCommunicationBackend) and over UCX, against real shard
// servers and a real registry inside the test process (testing/inproc_cluster).
// Workers are threads. Every strategy must equal single-process training bit
// for bit; bad input gets a clear error and changes nothing.
#include "worker/worker.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "core/topk.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "transport/ucx/ucx_testing.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 4;
// Three tensors, so fsdp has units that straddle shard boundaries.
const std::vector<TensorDesc> kTensors = {{"w1", {37, 11}}, {"b1", {11}}, {"w2", {11, 29}}};

int64_t NumParams() {
  int64_t n = 0;
  for (const auto& t : kTensors) {
    int64_t k = 1;
    for (int64_t d : t.shape) k *= d;
    n += k;
  }
  return n;
}

std::vector<float> Init() { return SineInit(static_cast<size_t>(NumParams())); }

// Rank r's gradient at `step` (0-based) for parameters `params`.
float Grad(int rank, int64_t step, size_t i, float param) {
  return 0.01f * std::cos(static_cast<float>(i) * 0.11f + static_cast<float>(rank) +
                          0.5f * static_cast<float>(step)) +
         0.001f * param;
}

// Single-process training on the mean of the ranks' gradients: of kWorld
// ranks, or of `grown` ranks from step `grow_at` on.
std::vector<float> Reference(int steps, int grow_at = -1, int grown = kWorld,
                             float lr_from_step_2 = 0) {
  std::vector<float> params = Init();
  const size_t n = params.size();
  OptimizerParams opt = TestAdam();
  std::vector<std::vector<float>> slots(StateSlots(opt), std::vector<float>(n));
  float* state[kMaxStateSlots] = {};
  for (size_t k = 0; k < slots.size(); ++k) state[k] = slots[k].data();
  InitState(opt, state, n);
  std::vector<std::vector<float>> grads(std::max(kWorld, grown), std::vector<float>(n));
  std::vector<float> mean(n);
  for (int64_t s = 0; s < steps; ++s) {
    const int world = grow_at >= 0 && s >= grow_at ? grown : kWorld;
    std::vector<const float*> srcs;
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < n; ++i) grads[r][i] = Grad(r, s, i, params[i]);
      srcs.push_back(grads[r].data());
    }
    ReduceMean(srcs.data(), world, mean.data(), n);
    if (s == 2 && lr_from_step_2 > 0) opt.lr = lr_from_step_2;
    ApplyUpdate(opt, s + 1, params.data(), mean.data(), state, n);
  }
  return params;
}

class WorkerTest : public ::testing::TestWithParam<InProcCluster::Kind> {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.servers = 2;
    options.transport = GetParam();
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override { cluster_->Stop(); }

  WorkerOptions Options(const std::string& job, int rank, Strategy strategy) {
    WorkerOptions o = cluster_->worker_options(job, rank, kWorld);
    o.strategy = strategy;
    o.optimizer = TestAdam();
    o.bucket_bytes = 1024;  // several buckets per shard
    if (strategy == Strategy::kFsdp) o.fsdp_units = {0, 2};
    return o;
  }

  static void OnRanks(const std::function<void(int)>& body) { tessel::OnRanks(kWorld, body); }

  // Trains kSteps with `strategy`; returns rank 0's final parameters.
  std::vector<float> Train(const std::string& job, Strategy strategy) {
    std::vector<std::vector<float>> out(kWorld);
    OnRanks([&](int r) {
      auto w = Worker::Connect(Options(job, r, strategy));
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
      for (int64_t s = 0; s < kSteps; ++s) {
        if (strategy == Strategy::kFsdp) {
          for (int u = 0; u < worker.num_units(); ++u) {
            auto p = worker.Gather(u);
            ASSERT_TRUE(p.ok()) << p.status();
            const Range range = worker.unit_range(u);
            absl::Span<float> g = worker.UnitGrads(u);
            ASSERT_EQ(g.size(), static_cast<size_t>(range.size()));
            for (size_t i = 0; i < g.size(); ++i) {
              g[i] = Grad(r, s, static_cast<size_t>(range.begin) + i, (*p)[i]);
            }
            worker.Release(u);
            ASSERT_TRUE(worker.PushUnit(u).ok());
          }
          ASSERT_TRUE(worker.FinishStep().ok());
        } else {
          absl::Span<float> p = worker.params();
          absl::Span<float> g = worker.grads();
          for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(r, s, i, p[i]);
          // Hand the first half over early: pushes overlap "backward".
          ASSERT_TRUE(worker.GradientsReady(0, static_cast<int64_t>(g.size()) / 2).ok());
          const absl::Time t0 = absl::Now();
          ASSERT_TRUE(worker.Step().ok());
          const int64_t took = absl::ToInt64Nanoseconds(absl::Now() - t0);
          const StepPhases ph = worker.last_step_phases();
          EXPECT_TRUE(ph.push_ns >= 0 && ph.wait_ns >= 0 && ph.pull_ns >= 0);
          EXPECT_LE(ph.push_ns + ph.wait_ns + ph.pull_ns, took) << "phases lie inside Step()";
        }
        EXPECT_EQ(worker.step(), s + 1);
      }
      // Zero-copy where the transport allows it, and reported.
      // Chosen per server at connect time, and reported.
      std::string path = "in place";
      if (GetParam() == InProcCluster::Kind::kUcxCopied) {
        path = "copied (active messages over sysv)";
      } else if (GetParam() == InProcCluster::Kind::kUcxRma) {
        path = "copied (rendezvous by RMA over " + CmaOrTcp() + ")";
      }
      EXPECT_EQ(worker.data_path(), path);
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
    });
    EXPECT_EQ(out[0], out[1]) << "ranks disagree";
    return out[0];
  }

  std::unique_ptr<InProcCluster> cluster_;
};

TEST_P(WorkerTest, EveryStrategyEqualsSingleProcessTrainingBitwise) {
  const std::vector<float> want = Reference(kSteps);
  for (Strategy s : {Strategy::kZero2, Strategy::kZero1, Strategy::kDdp, Strategy::kFsdp}) {
    SCOPED_TRACE(std::string(StrategyName(s)));
    const std::vector<float> got = Train(std::string("eq-") + std::string(StrategyName(s)), s);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "parameter " << i;
    }
  }
}

// Prefix order through real shard servers: with three ranks, rank 2 hands
// its gradients over late, so ranks 0 and 1 land first and the servers sum
// them while the buckets wait (ShardStats.folded_pushes counts it); the
// result is still single-process training, bit for bit.
TEST_P(WorkerTest, ThreeRanksFoldedInPrefixOrderStayBitwise) {
  constexpr int kThree = 3;
  const std::vector<float> want = Reference(kSteps, /*grow_at=*/0, /*grown=*/kThree);
  for (Strategy strategy : {Strategy::kZero2, Strategy::kDdp}) {
    SCOPED_TRACE(std::string(StrategyName(strategy)));
    const std::string job = std::string("fold-") + std::string(StrategyName(strategy));
    std::vector<std::vector<float>> out(kThree);
    int64_t folded = -1;
    std::vector<std::thread> threads;
    for (int r = 0; r < kThree; ++r) {
      threads.emplace_back([&, r] {
        WorkerOptions o = cluster_->worker_options(job, r, kThree);
        o.strategy = strategy;
        o.optimizer = TestAdam();
        o.bucket_bytes = 1024;
        auto w = Worker::Connect(o);
        ASSERT_TRUE(w.ok()) << w.status();
        Worker& worker = **w;
        ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
        for (int64_t s = 0; s < kSteps; ++s) {
          absl::Span<float> p = worker.params();
          absl::Span<float> g = worker.grads();
          for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(r, s, i, p[i]);
          if (r == kThree - 1) absl::SleepFor(absl::Milliseconds(50));
          ASSERT_TRUE(worker.Step().ok());
        }
        auto all = worker.GatherAll();
        ASSERT_TRUE(all.ok()) << all.status();
        out[r] = std::move(*all);
        if (r == 0) {
          auto stats = worker.ServerStats();
          ASSERT_TRUE(stats.ok()) << stats.status();
          folded = 0;
          for (const ShardReport& rep : *stats) folded += rep.folded_pushes;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_GT(folded, 0) << "ranks 0 and 1 were summed before rank 2 arrived";
    ExpectEveryRankEqual(out, want);
  }
}

// Top-k compression (the one mode that is not bitwise): pushes carry the
// largest tenth of each bucket as (index, value) pairs, so the servers
// receive exactly those bytes; error feedback keeps the rest for later, so
// SGD on a quadratic still reaches the ranks' mean target.
TEST_P(WorkerTest, TopkCompressionPushesOnlyThePairsAndStillConverges) {
  constexpr double kRatio = 0.1;
  constexpr int kTopkSteps = 400;
  for (Strategy strategy : {Strategy::kDdp, Strategy::kZero2}) {
    SCOPED_TRACE(std::string(StrategyName(strategy)));
    const std::string job = absl::StrCat("topk-", StrategyName(strategy));
    std::vector<std::vector<float>> out(kWorld);
    std::vector<int64_t> pushed(kWorld, -1);
    int64_t sparse_per_step = 0, dense_per_step = 0;
    const std::vector<float> init(Init().size(), 0.f);
    auto target = [](int rank, size_t i) {
      return static_cast<float>((i * 37 + rank * 11) % 19) * 0.1f - 0.9f;
    };
    OnRanks([&](int r) {
      WorkerOptions o = Options(job, r, strategy);
      o.optimizer = OptimizerParams{};
      o.optimizer.kind = OptimizerParams::Kind::kSgd;
      // Small enough that an entry sent once in ~10 steps (its ~10 steps of
      // held-back gradient at once) does not overshoot.
      o.optimizer.lr = 0.02;
      o.topk_ratio = kRatio;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, init).ok());
      for (int s = 0; s < kTopkSteps; ++s) {
        absl::Span<float> p = worker.params();
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) g[i] = p[i] - target(r, i);
        ASSERT_TRUE(worker.Step().ok());
      }
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
      if (r == 0) {
        auto reports = worker.ServerStats();
        ASSERT_TRUE(reports.ok()) << reports.status();
        int64_t bytes = 0;
        for (const ShardReport& rep : *reports) bytes += rep.pushed_bytes;
        pushed[0] = bytes;
        const Layout& layout = worker.layout();
        for (int shard = 0; shard < layout.num_shards(); ++shard) {
          for (int b = 0; b < layout.num_buckets(shard); ++b) {
            const int64_t n = layout.bucket_range(shard, b).size();
            sparse_per_step += kWorld * 8 * static_cast<int64_t>(std::ceil(kRatio * n));
            dense_per_step += kWorld * 4 * n;
          }
        }
      }
    });
    EXPECT_EQ(out[0], out[1]) << "ranks disagree";
    EXPECT_EQ(pushed[0], kTopkSteps * sparse_per_step) << "exactly the pairs were pushed";
    EXPECT_LT(pushed[0], kTopkSteps * dense_per_step / 4) << "a fifth of the dense bytes";
    double worst = 0, start = 0;
    for (size_t i = 0; i < out[0].size(); ++i) {
      const double mean = 0.5 * (target(0, i) + target(1, i));
      worst = std::max(worst, std::fabs(out[0][i] - mean));
      start = std::max(start, std::fabs(init[i] - mean));
    }
    // Uncompressed, lr 0.02 for 400 steps leaves 0.98^400 = 3e-4 of the
    // start; top-k's delays (an entry waits for its turn) leave more.
    EXPECT_LT(worst, 0.2 * start) << "every coordinate moved most of the way to the mean target";
  }
  // Not for FSDP (per-unit gradients): refused with a clear error.
  WorkerOptions bad = Options("topk-fsdp", 0, Strategy::kFsdp);
  bad.world_size = 1;
  bad.topk_ratio = 0.5;
  auto w = Worker::Connect(bad);
  absl::Status s = w.ok() ? (*w)->RegisterLayout(kTensors, Init()) : w.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("top-k"), std::string::npos) << s;
}

// Top-k compressed by the caller (as a GPU worker does, worker/device_staging.h)
// for every other bucket, by the worker for the rest: the same parameters as
// the worker compressing every bucket. Bad hand-overs are refused and push
// nothing.
TEST_P(WorkerTest, CallerCompressedBucketsArePushedAsTheyAre) {
  constexpr int kCompressedSteps = 4;
  auto run = [&](const std::string& job, bool by_caller) {
    std::vector<std::vector<float>> out(kWorld);
    OnRanks([&](int r) {
      WorkerOptions o = Options(job, r, Strategy::kZero2);
      o.topk_ratio = 0.25;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      EXPECT_EQ(worker.SparseGradientsReady(0, 0).code(), absl::StatusCode::kFailedPrecondition);
      ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
      const Layout& layout = worker.layout();
      std::vector<float> residual(layout.num_params(), 0.f);
      for (int64_t step = 0; step < kCompressedSteps; ++step) {
        absl::Span<float> p = worker.params();
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(r, step, i, p[i]);
        if (by_caller) {
          for (int s = 0; s < layout.num_shards(); ++s) {
            for (int b = 0; b < layout.num_buckets(s); b += 2) {
              const Range br = layout.bucket_range(s, b);
              auto wire = worker.SparseBucket(s, b);
              ASSERT_TRUE(wire.ok()) << wire.status();
              const int64_t k = static_cast<int64_t>(wire->size() / 8);
              ASSERT_EQ(k, TopkCount(o.topk_ratio, br.size()));
              if (k > 1 && step == 0) {  // indices that do not rise: refused
                std::vector<uint32_t> idx(static_cast<size_t>(k));
                for (int64_t j = 0; j < k; ++j) idx[j] = static_cast<uint32_t>(k - 1 - j);
                std::memcpy(wire->data(), idx.data(), idx.size() * 4);
                absl::Status bad = worker.SparseGradientsReady(s, b);
                EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
              }
              TopkCompress(g.data() + br.begin, residual.data() + br.begin, br.size(), k,
                           wire->data());
              ASSERT_TRUE(worker.SparseGradientsReady(s, b).ok());
              EXPECT_EQ(worker.SparseGradientsReady(s, b).code(),
                        absl::StatusCode::kInvalidArgument)
                  << "handed over twice";
            }
          }
          EXPECT_EQ(worker.SparseGradientsReady(layout.num_shards(), 0).code(),
                    absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(worker.SparseBucket(0, layout.num_buckets(0)).status().code(),
                    absl::StatusCode::kInvalidArgument);
        }
        ASSERT_TRUE(worker.Step().ok());
      }
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
    });
    EXPECT_EQ(out[0], out[1]) << "ranks disagree";
    return out[0];
  };
  const std::vector<float> by_worker = run("sparse-worker", false);
  const std::vector<float> by_caller = run("sparse-caller", true);
  EXPECT_EQ(by_caller, by_worker);
  // Without top-k there are no pairs to hand over.
  WorkerOptions o = Options("sparse-off", 0, Strategy::kZero2);
  o.world_size = 1;
  auto w = Worker::Connect(o);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->RegisterLayout(kTensors, Init()).ok());
  EXPECT_TRUE((*w)->sparse_grads().empty());
  EXPECT_EQ((*w)->SparseGradientsReady(0, 0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(WorkerTest, StateQueriesAreCollectivesOverTheJob) {
  OnRanks([&](int r) {
    auto w = Worker::Connect(Options("queries", r, Strategy::kZero2));
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
    absl::Span<float> g = worker.grads();
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(r + 1) * 0.5f;
    auto mean = worker.SynchronizeGradients();
    ASSERT_TRUE(mean.ok()) << mean.status();
    for (float x : *mean) ASSERT_EQ(x, 0.75f);
    auto stop = worker.ReportMetric(static_cast<float>(r));
    ASSERT_TRUE(stop.ok()) << stop.status();
    EXPECT_FALSE(*stop);
    auto report = worker.SynchronizeOptimizerState();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->consistent);
    EXPECT_EQ(report->digests.size(), 2u);  // one per shard
    auto blob = worker.Serialize();
    ASSERT_TRUE(blob.ok()) << blob.status();
    EXPECT_TRUE(worker.Deserialize(*blob).ok());
    EXPECT_FALSE(worker.Deserialize("not a blob").ok());
    EXPECT_EQ(worker.step(), 0);
  });
}

TEST_P(WorkerTest, BadInputIsRefusedAndChangesNothing) {
  WorkerOptions bad = Options("bad", 2, Strategy::kZero2);  // rank 2 of 2
  auto refused = Worker::Connect(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("rank 2 is outside [0, 2)"), std::string::npos);

  OnRanks([&](int r) {
    auto w = Worker::Connect(Options("bad", r, Strategy::kZero2));
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    EXPECT_EQ(worker.Step().code(), absl::StatusCode::kFailedPrecondition);
    if (r == 0) {  // rank 0 seeds the servers: its init must fit the layout
      const std::vector<float> short_init(3, 0.f);
      absl::Status s = worker.RegisterLayout(kTensors, short_init);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find("init has 3 floats but the layout has"), std::string::npos);
    }
    ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
    EXPECT_EQ(worker.RegisterLayout(kTensors, Init()).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(worker.GradientsReady(0, NumParams() + 1).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(worker.AccumulateGradients(std::vector<float>(5)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(worker.Gather(0).status().code(), absl::StatusCode::kInvalidArgument);
    // Nothing above changed the job: a step still trains from Init().
    for (float& g : worker.grads()) g = 0.f;
    ASSERT_TRUE(worker.Step().ok());
    EXPECT_EQ(worker.step(), 1);
  });
}

// A shard server restarts between steps 3 and 4 (a crash and a restart, as a
// supervisor would do it): the next step fails recoverably on every worker,
// Recover() rolls the job back to its latest complete checkpoint, and the
// training that goes on from there ends bitwise where uninterrupted training
// does. Exercises Membership, RecoveryCoordinator and the DataChannel's
// fencing over the in-process transport as well as UCX.
TEST_P(WorkerTest, ARestartedShardServerIsRecoveredFromAndTrainingEndsBitwise) {
  cluster_->Stop();
  InProcCluster::Options options;
  options.servers = 2;
  options.transport = GetParam();
  options.checkpoint_dir =
      absl::StrCat(::testing::TempDir(), "/ckpt-", InProcCluster::KindName(GetParam()));
  cluster_ = std::make_unique<InProcCluster>(options);
  ASSERT_TRUE(cluster_->Start().ok());
  const RestartRun run = TrainThroughAServerRestart(
      kWorld, [&](int r) { return Options("recover", r, Strategy::kZero2); }, kTensors, Init(),
      Grad, [&] { return cluster_->RestartServer(1); });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(run.recoveries[r], 1) << "rank " << r;
  EXPECT_EQ(run.params[0], run.params[1]);
  ExpectParamsEqual(run.params[0], Reference(6));
}

// Elastic growth: two workers train; a third (rank 2 with
// elastic_max_workers=3, as a scaled-up Indexed Job's new index) joins while
// they run. At the next checkpoint boundary (step 2) their Step() returns a
// recoverable status after applying the step, Recover() admits the newcomer
// without rolling back, and the three go on from step 2 as ranks 0, 1, 2.
// Every rank ends bitwise equal to single-process training on the mean of 2
// ranks' gradients for steps 0-1 and of 3 ranks' after: what a clean resume
// of 3 workers from the checkpoint of step 2 computes. zero2 restores the
// servers from that checkpoint; DDP re-creates them and the newcomer takes
// the workers' state; fsdp gathers unit by unit.
TEST_P(WorkerTest, ANewcomerIsAdmittedAtTheNextCheckpointBoundaryAndTrainingEndsBitwise) {
  cluster_->Stop();
  InProcCluster::Options options;
  options.servers = 2;
  options.transport = GetParam();
  options.checkpoint_dir =
      absl::StrCat(::testing::TempDir(), "/grow-", InProcCluster::KindName(GetParam()));
  cluster_ = std::make_unique<InProcCluster>(options);
  ASSERT_TRUE(cluster_->Start().ok());
  constexpr int kTotal = 5;
  constexpr int kBoundary = 2;
  const std::vector<float> want = Reference(kTotal, kBoundary, 3);
  // Also with host aggregation: the two workers share host "a" (one group:
  // the flat sum), the newcomer comes on host "b" (groups {0,0,1}: the
  // same sum order), so the reference stands; the groups change at the
  // admission.
  struct Run {
    Strategy strategy;
    bool hosts;
  };
  for (const Run run :
       {Run{Strategy::kZero2, false}, Run{Strategy::kDdp, false}, Run{Strategy::kFsdp, false},
        Run{Strategy::kZero2, true}, Run{Strategy::kDdp, true}}) {
    const Strategy strategy = run.strategy;
    SCOPED_TRACE(absl::StrCat(StrategyName(strategy), run.hosts ? " with host aggregation" : ""));
    const std::string job =
        absl::StrCat("grow-", run.hosts ? "hosts-" : "", StrategyName(strategy));
    absl::Notification newcomer_registered;
    // The newcomer arrives once the job runs: joining while the original
    // workers still create the job could let them create it at different
    // membership epochs (a recoverable refusal of the first frames, which
    // this test does not expect before the boundary).
    std::atomic<int> ran_step0{0};
    absl::Notification originals_ran;
    std::vector<std::vector<float>> out(3);
    std::vector<int64_t> admitted_at(3, -1);
    std::vector<int> final_rank(3, -1), final_world(3, -1);
    auto body = [&](int id) {
      if (id == 2) {
        ASSERT_TRUE(originals_ran.WaitForNotificationWithTimeout(absl::Seconds(60)));
      }
      WorkerOptions o = Options(job, id, strategy);
      o.recovery = true;
      o.recovery_timeout = absl::Seconds(30);
      o.checkpoint.every_steps = kBoundary;
      o.elastic_max_workers = 3;
      if (run.hosts) {
        o.aggregation = Aggregation::kHost;
        o.host_id = id < 2 ? "a" : "b";
      }
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      if (id == 2) newcomer_registered.Notify();
      ASSERT_TRUE(worker.RegisterLayout(kTensors, id == 2 ? std::vector<float>() : Init()).ok());
      if (id == 2) {
        admitted_at[id] = worker.step();
        EXPECT_EQ(worker.rank(), 2);
        EXPECT_EQ(worker.world_size(), 3);
      }
      for (int64_t s = worker.step(); s < kTotal; ++s) {
        // The newcomer is registered before the boundary step runs, so every
        // rank sees it there.
        if (s == 1 && id < 2 && ++ran_step0 == 2) originals_ran.Notify();
        if (s == kBoundary - 1) newcomer_registered.WaitForNotification();
        const int rank = worker.rank();
        absl::Status st;
        if (strategy == Strategy::kFsdp) {
          for (int u = 0; u < worker.num_units() && st.ok(); ++u) {
            auto p = worker.Gather(u);
            ASSERT_TRUE(p.ok()) << p.status();
            const Range range = worker.unit_range(u);
            absl::Span<float> g = worker.UnitGrads(u);
            for (size_t i = 0; i < g.size(); ++i) {
              g[i] = Grad(rank, s, static_cast<size_t>(range.begin) + i, (*p)[i]);
            }
            worker.Release(u);
            st = worker.PushUnit(u);
          }
          if (st.ok()) st = worker.FinishStep();
        } else {
          absl::Span<float> p = worker.params();
          absl::Span<float> g = worker.grads();
          for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(rank, s, i, p[i]);
          st = worker.Step();
        }
        if (Worker::IsRecoverable(st)) {
          EXPECT_EQ(s + 1, kBoundary) << st;  // only the boundary step, applied
          EXPECT_EQ(worker.step(), kBoundary);
          EXPECT_NE(st.message().find("admitting 1 new worker(s) (registry rank(s) 2)"),
                    std::string::npos)
              << st;
          st = worker.Recover();
          ASSERT_TRUE(st.ok()) << st;
          admitted_at[id] = worker.step();  // nothing rolled back
          EXPECT_EQ(worker.world_size(), 3);
          if (run.hosts) {
            EXPECT_EQ(worker.aggregation(), "host aggregation: 2 hosts (ranks 0-1; 2)");
          }
          s = worker.step() - 1;
          continue;
        }
        ASSERT_TRUE(st.ok()) << st;
      }
      final_rank[id] = worker.rank();
      final_world[id] = worker.world_size();
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[id] = std::move(*all);
    };
    std::vector<std::thread> threads;
    for (int id = 0; id < 3; ++id) threads.emplace_back(body, id);
    for (auto& t : threads) t.join();
    for (int id = 0; id < 3; ++id) {
      EXPECT_EQ(admitted_at[id], kBoundary) << "worker " << id;
      EXPECT_EQ(final_rank[id], id);
      EXPECT_EQ(final_world[id], 3);
      ASSERT_EQ(out[id].size(), want.size()) << "worker " << id;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(out[id][i], want[i]) << "worker " << id << " parameter " << i;
      }
    }
  }
}

// A learning-rate schedule: after two steps every rank sets a new lr
// (SetOptimizer); the third step on uses it, on the servers (zero2) as on
// the workers (ddp), bitwise as single-process training that changed lr
// there. Another kind, or an invalid value, is refused and changes nothing.
TEST_P(WorkerTest, NewOptimizerSettingsApplyFromTheNextStep) {
  constexpr float kNewLr = 2.5e-3f;
  const std::vector<float> want = Reference(kSteps, -1, kWorld, kNewLr);
  for (Strategy strategy : {Strategy::kZero2, Strategy::kDdp}) {
    SCOPED_TRACE(std::string(StrategyName(strategy)));
    std::vector<std::vector<float>> out(kWorld);
    OnRanks([&](int r) {
      auto w = Worker::Connect(Options(absl::StrCat("lr-", StrategyName(strategy)), r, strategy));
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
      for (int64_t s = 0; s < kSteps; ++s) {
        if (s == 2) {
          OptimizerParams sgd = TestAdam();
          sgd.kind = OptimizerParams::Kind::kSgd;
          absl::Status refused = worker.SetOptimizer(sgd);
          EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
          EXPECT_NE(refused.message().find("cannot become SGD"), std::string::npos) << refused;
          OptimizerParams bad = TestAdam();
          bad.lr = -1;
          EXPECT_EQ(worker.SetOptimizer(bad).code(), absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(worker.options().optimizer.lr, TestAdam().lr);  // unchanged
          OptimizerParams next = TestAdam();
          next.lr = kNewLr;
          ASSERT_TRUE(worker.SetOptimizer(next).ok());
        }
        absl::Span<float> p = worker.params();
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(r, s, i, p[i]);
        ASSERT_TRUE(worker.Step().ok());
      }
      EXPECT_EQ(worker.options().optimizer.lr, kNewLr);
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
    });
    ExpectEveryRankEqual(out, want);
  }
}

// torch's rule for parameters without a gradient: a step may leave tensors
// out (SkipTensors: no rank had a gradient for them). They keep their values
// and state (weight decay included), and each tensor's Adam step counts only
// its own updates, on the servers (zero2, fsdp) as on the workers (ddp),
// bitwise as torch's per-parameter loop. The skips travel in Serialize's
// blob: loaded into a job of another strategy, the next step still uses each
// tensor's own step. Bad indices are refused and change nothing.
TEST_P(WorkerTest, TensorsWithoutGradientsKeepTheirValuesAndState) {
  const std::vector<std::vector<int32_t>> skip = {{1}, {}, {0, 2}, {2}};
  const int steps = static_cast<int>(skip.size());
  OptimizerParams opt = TestAdam();
  opt.weight_decay = 0.05f;
  auto skipped = [&](int64_t s, size_t t) {
    return s < steps &&
           std::find(skip[s].begin(), skip[s].end(), static_cast<int32_t>(t)) != skip[s].end();
  };
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
  for (const auto& t : kTensors) {
    int64_t k = 1;
    for (int64_t d : t.shape) k *= d;
    begin.push_back(end.empty() ? 0 : end.back());
    end.push_back(begin.back() + k);
  }
  auto tensor_of = [&](size_t i) {
    size_t t = 0;
    while (static_cast<int64_t>(i) >= end[t]) ++t;
    return t;
  };
  // Reference: steps + 1 steps (the last without skips), per tensor.
  std::vector<float> want = Init();
  const size_t n = want.size();
  std::vector<std::vector<float>> slots(2, std::vector<float>(n, 0.f));
  std::vector<int64_t> tensor_step(kTensors.size(), 0);
  for (int64_t s = 0; s <= steps; ++s) {
    std::vector<std::vector<float>> g(kWorld, std::vector<float>(n));
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < n; ++i)
        g[r][i] = skipped(s, tensor_of(i)) ? 0.f : Grad(r, s, i, want[i]);
    }
    const float* srcs[kWorld] = {g[0].data(), g[1].data()};
    std::vector<float> mean(n);
    ReduceMean(srcs, kWorld, mean.data(), n);
    for (size_t t = 0; t < kTensors.size(); ++t) {
      if (skipped(s, t)) continue;
      float* st[kMaxStateSlots] = {slots[0].data() + begin[t], slots[1].data() + begin[t]};
      ApplyUpdate(opt, ++tensor_step[t], want.data() + begin[t], mean.data() + begin[t], st,
                  static_cast<size_t>(end[t] - begin[t]));
    }
  }
  for (Strategy strategy : {Strategy::kZero2, Strategy::kDdp, Strategy::kFsdp}) {
    SCOPED_TRACE(std::string(StrategyName(strategy)));
    const Strategy next = strategy == Strategy::kZero2 ? Strategy::kDdp : Strategy::kZero2;
    std::vector<std::vector<float>> out(kWorld);
    OnRanks([&](int r) {
      auto run = [&](Worker& worker, int64_t s) {
        if (worker.options().strategy == Strategy::kFsdp) {
          for (int u = 0; u < worker.num_units(); ++u) {
            auto p = worker.Gather(u);
            ASSERT_TRUE(p.ok()) << p.status();
            const Range range = worker.unit_range(u);
            absl::Span<float> g = worker.UnitGrads(u);
            for (size_t i = 0; i < g.size(); ++i) {
              const size_t at = static_cast<size_t>(range.begin) + i;
              g[i] = skipped(s, tensor_of(at)) ? 0.f : Grad(r, s, at, (*p)[i]);
            }
            worker.Release(u);
            ASSERT_TRUE(worker.PushUnit(u).ok());
          }
          ASSERT_TRUE(worker.FinishStep().ok());
          return;
        }
        absl::Span<float> p = worker.params();
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = skipped(s, tensor_of(i)) ? 0.f : Grad(r, s, i, p[i]);
        }
        ASSERT_TRUE(worker.Step().ok());
      };
      WorkerOptions o = Options(absl::StrCat("skip-", StrategyName(strategy)), r, strategy);
      o.optimizer = opt;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
      for (int64_t s = 0; s < steps; ++s) {
        if (s == 0) {
          for (std::vector<int32_t> bad : {std::vector<int32_t>{3}, {-1}, {1, 1}}) {
            absl::Status refused = worker.SkipTensors(bad);
            EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
          }
        }
        ASSERT_TRUE(worker.SkipTensors(skip[s]).ok());
        run(worker, s);
      }
      auto blob = worker.Serialize();
      ASSERT_TRUE(blob.ok()) << blob.status();
      // The blob in a job of another strategy: each tensor's step goes on.
      WorkerOptions o2 = Options(absl::StrCat("skip-", StrategyName(strategy), "-then"), r, next);
      o2.optimizer = opt;
      auto w2 = Worker::Connect(o2);
      ASSERT_TRUE(w2.ok()) << w2.status();
      ASSERT_TRUE((*w2)->RegisterLayout(kTensors, Init()).ok());
      ASSERT_TRUE((*w2)->Deserialize(*blob).ok());
      run(**w2, steps);
      auto all = (*w2)->GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = std::move(*all);
    });
    ExpectEveryRankEqual(out, want);
  }
}

// A rank beyond the world without elastic growth is bad input; with growth,
// a job already at elastic_max_workers has no room and says so.
TEST_P(WorkerTest, GrowthOptionsAreChecked) {
  WorkerOptions o = Options("grow-bad", 2, Strategy::kZero2);
  o.recovery = true;
  o.checkpoint.every_steps = 2;
  o.elastic_max_workers = 1;  // below world_size
  auto refused = Worker::Connect(o);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("elastic_max_workers must be 0 (off) or in"),
            std::string::npos)
      << refused.status();
  o.elastic_max_workers = 3;
  o.checkpoint.every_steps = 0;
  refused = Worker::Connect(o);
  EXPECT_NE(refused.status().message().find("needs checkpoint.every_steps"), std::string::npos)
      << refused.status();
  o.checkpoint.every_steps = 2;
  o.recovery = false;
  refused = Worker::Connect(o);
  EXPECT_NE(refused.status().message().find("needs recovery"), std::string::npos)
      << refused.status();
  o.recovery = true;
  o.elastic_max_workers = 2;
  refused = Worker::Connect(o);  // rank 2 of 2, growth up to 2: no such rank
  EXPECT_NE(refused.status().message().find("rank 2 is outside [0, 2)"), std::string::npos)
      << refused.status();
}

INSTANTIATE_TEST_SUITE_P(Transports, WorkerTest,
                         ::testing::Values(InProcCluster::Kind::kInProc, InProcCluster::Kind::kUcx,
                                           InProcCluster::Kind::kUcxCopied,
                                           InProcCluster::Kind::kUcxRma),
                         [](const auto& info) { return InProcCluster::KindName(info.param); });

}  // namespace
}  // namespace tessel
