// The seeds' state queries, done properly for every strategy:
// SynchronizeGradients, SynchronizeOptimizerState, Serialize/Deserialize and
// the early-stopping decision, each a collective that every rank calls at the
// same point between steps.
//
// Real shard server processes over UCX; the workers are Worker objects on
// threads of this process (each with its own UCX endpoints and leases).
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "gtest/gtest.h"
#include "testing/local_cluster.h"
#include "worker/worker.h"

namespace tessel {
namespace {

constexpr int64_t kParams = 3000;

class StateQueriesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions copt;
    copt.servers = 2;
    copt.run_dir = MakeRunDir("state-queries");
    cluster_ = new LocalCluster(copt);
    absl::Status s = cluster_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    cluster_->Stop();
    delete cluster_;
  }

  WorkerOptions Options(const std::string& job, int rank, int world, Strategy strategy,
                        int servers = 2) {
    WorkerOptions o;
    o.registry = cluster_->registry_address();
    o.token = cluster_->WorkerToken();
    o.job = job;
    o.rank = rank;
    o.world_size = world;
    o.num_servers = servers;
    o.strategy = strategy;
    o.optimizer.kind = OptimizerParams::Kind::kAdam;
    o.optimizer.lr = 0.01f;
    o.bucket_bytes = 4096;
    o.ucx.tls = "posix,sysv,self";
    o.step_timeout = absl::Seconds(60);
    return o;
  }

  // Runs `body(rank, worker)` on `world` threads, each with a registered worker.
  void RunRanks(int world, const std::function<WorkerOptions(int)>& options,
                const std::function<void(int, Worker*)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto w = Worker::Connect(options(r));
        ASSERT_TRUE(w.ok()) << w.status();
        std::vector<TensorDesc> tensors = {{"a", {kParams / 3}}, {"b", {kParams - kParams / 3}}};
        std::vector<float> init(kParams);
        for (int64_t i = 0; i < kParams; ++i) init[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
        absl::Status s = (*w)->RegisterLayout(tensors, init);
        ASSERT_TRUE(s.ok()) << s;
        body(r, w->get());
      });
    }
    for (auto& t : threads) t.join();
  }

  static float Grad(int rank, int64_t step, int64_t i) {
    return 0.01f * static_cast<float>((i * 7 + rank * 13 + step * 3) % 29) - 0.1f;
  }

  static LocalCluster* cluster_;
};
LocalCluster* StateQueriesTest::cluster_ = nullptr;

TEST_F(StateQueriesTest, SynchronizeGradientsIsTheRankOrderMeanAndChangesNothing) {
  constexpr int kWorld = 3;
  for (Strategy strategy : {Strategy::kZero1, Strategy::kDdp}) {
    const std::string job = absl::StrCat("sg", static_cast<int>(strategy));
    // The expected mean: ranks summed in rank order, divided by W.
    std::vector<std::vector<float>> grads(kWorld, std::vector<float>(kParams));
    std::vector<const float*> srcs;
    for (int r = 0; r < kWorld; ++r) {
      for (int64_t i = 0; i < kParams; ++i) grads[r][i] = Grad(r, 0, i);
      srcs.push_back(grads[r].data());
    }
    std::vector<float> want(kParams);
    ReduceMean(srcs.data(), kWorld, want.data(), kParams);
    std::vector<std::vector<float>> after(kWorld);
    RunRanks(
        kWorld, [&](int r) { return Options(job, r, kWorld, strategy); },
        [&](int r, Worker* w) {
          std::copy(grads[r].begin(), grads[r].end(), w->grads().begin());
          auto mean = w->SynchronizeGradients();
          ASSERT_TRUE(mean.ok()) << mean.status();
          EXPECT_EQ(std::vector<float>(mean->begin(), mean->end()), want) << "rank " << r;
          EXPECT_EQ(std::vector<float>(w->grads().begin(), w->grads().end()), grads[r]);
          EXPECT_EQ(w->step(), 0);
          ASSERT_TRUE(w->Step().ok());
          after[r].assign(w->params().begin(), w->params().end());
        });
    // The step after the query applied exactly that mean, once.
    OptimizerParams opt = Options(job, 0, kWorld, strategy).optimizer;
    std::vector<float> params(kParams);
    for (int64_t i = 0; i < kParams; ++i) params[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
    std::vector<std::vector<float>> state(StateSlots(opt), std::vector<float>(kParams, 0.f));
    float* ptrs[kMaxStateSlots] = {state[0].data(), state[1].data()};
    ApplyUpdate(opt, 1, params.data(), want.data(), ptrs, kParams);
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(after[r], params) << "rank " << r;
  }
}

TEST_F(StateQueriesTest, SynchronizeGradientsRefusesPerUnitGradients) {
  RunRanks(
      1,
      [&](int r) {
        WorkerOptions o = Options("sg-fsdp", r, 1, Strategy::kFsdp);
        o.fsdp_units = {0, 1};
        return o;
      },
      [&](int, Worker* w) {
        auto mean = w->SynchronizeGradients();
        EXPECT_EQ(mean.status().code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_NE(mean.status().message().find("pushed and freed"), std::string::npos)
            << mean.status();
      });
}

// Serialize on a 2-worker ZeRO-2 job over 2 servers, Deserialize into a
// 1-worker DDP job on 1 server: the state carries over exactly, so training
// on continues bitwise as if uninterrupted (every rank pushes the same
// gradient, so the mean over 2 ranks equals the one rank's gradient).
TEST_F(StateQueriesTest, SerializeThenDeserializeAcrossStrategyWorldAndShards) {
  std::vector<std::string> blobs(2);
  std::vector<float> straight;
  RunRanks(
      2, [&](int r) { return Options("ser-a", r, 2, Strategy::kZero2); },
      [&](int r, Worker* w) {
        for (int64_t k = 0; k < 5; ++k) {
          if (k == 3) {
            auto blob = w->Serialize();
            ASSERT_TRUE(blob.ok()) << blob.status();
            blobs[r] = *blob;
          }
          for (int64_t i = 0; i < kParams; ++i) w->grads()[i] = Grad(0, k, i);
          ASSERT_TRUE(w->Step().ok());
        }
        if (r == 0) straight.assign(w->params().begin(), w->params().end());
      });
  ASSERT_FALSE(blobs[0].empty());
  EXPECT_EQ(blobs[0], blobs[1]) << "every rank serializes the same state";
  std::vector<float> resumed;
  RunRanks(
      1, [&](int r) { return Options("ser-b", r, 1, Strategy::kDdp, 1); },
      [&](int, Worker* w) {
        // A damaged blob is refused and changes nothing.
        std::string bad = blobs[0];
        bad[bad.size() / 2] ^= 1;
        absl::Status s = w->Deserialize(bad);
        EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
        EXPECT_EQ(w->step(), 0);
        s = w->Deserialize(blobs[0]);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(w->step(), 3);
        for (int64_t k = 3; k < 5; ++k) {
          for (int64_t i = 0; i < kParams; ++i) w->grads()[i] = Grad(0, k, i);
          ASSERT_TRUE(w->Step().ok());
        }
        resumed.assign(w->params().begin(), w->params().end());
      });
  EXPECT_EQ(resumed, straight);
  // And back into a ZeRO-1 job on 2 servers with 2 workers.
  RunRanks(
      2, [&](int r) { return Options("ser-c", r, 2, Strategy::kZero1); },
      [&](int r, Worker* w) {
        absl::Status s = w->Deserialize(blobs[r]);
        ASSERT_TRUE(s.ok()) << s;
        for (int64_t k = 3; k < 5; ++k) {
          for (int64_t i = 0; i < kParams; ++i) w->grads()[i] = Grad(0, k, i);
          ASSERT_TRUE(w->Step().ok());
        }
        EXPECT_EQ(std::vector<float>(w->params().begin(), w->params().end()), straight);
      });
}

TEST_F(StateQueriesTest, DeserializeRefusesAnotherModel) {
  std::string blob;
  RunRanks(
      1, [&](int r) { return Options("ser-d", r, 1, Strategy::kZero2); },
      [&](int, Worker* w) {
        auto b = w->Serialize();
        ASSERT_TRUE(b.ok()) << b.status();
        blob = *b;
      });
  RunRanks(
      1,
      [&](int r) {
        WorkerOptions o = Options("ser-e", r, 1, Strategy::kZero2);
        o.optimizer.kind = OptimizerParams::Kind::kSgd;
        o.optimizer.momentum = 0.9f;
        return o;
      },
      [&](int, Worker* w) {
        absl::Status s = w->Deserialize(blob);
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        EXPECT_NE(s.message().find("ADAM"), std::string::npos) << s;
      });
}

TEST_F(StateQueriesTest, SynchronizeOptimizerStateChecksShardsAndRepairsDdpRanks) {
  RunRanks(
      2, [&](int r) { return Options("sos-z", r, 2, Strategy::kZero2); },
      [&](int, Worker* w) {
        for (int64_t i = 0; i < kParams; ++i) w->grads()[i] = Grad(0, 0, i);
        ASSERT_TRUE(w->Step().ok());
        auto report = w->SynchronizeOptimizerState();
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_TRUE(report->consistent);
        EXPECT_EQ(report->digests.size(), 2u) << "one per shard";
        EXPECT_EQ(report->step, 1);
      });
  std::vector<std::vector<float>> params(3);
  RunRanks(
      3, [&](int r) { return Options("sos-d", r, 3, Strategy::kDdp); },
      [&](int r, Worker* w) {
        for (int64_t i = 0; i < kParams; ++i) w->grads()[i] = Grad(r, 0, i);
        ASSERT_TRUE(w->Step().ok());
        auto report = w->SynchronizeOptimizerState();
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_TRUE(report->consistent);
        EXPECT_EQ(report->digests.size(), 3u) << "one per rank";
        if (r == 1) w->params()[17] += 1.0f;  // a rank drifts (e.g. a bug in user code)
        report = w->SynchronizeOptimizerState();
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_FALSE(report->consistent);
        EXPECT_EQ(report->repaired_ranks, std::vector<int>{1});
        report = w->SynchronizeOptimizerState();
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_TRUE(report->consistent) << "repaired from rank 0";
        params[r].assign(w->params().begin(), w->params().end());
      });
  EXPECT_EQ(params[1], params[0]);
  EXPECT_EQ(params[2], params[0]);
}

TEST_F(StateQueriesTest, EarlyStoppingDecidesAlikeOnEveryRank) {
  // Job-wide means 1.0, 0.9, 0.95, 0.92: no improvement twice -> stop at the
  // 4th report (patience 2), whatever each rank's own value says.
  const std::vector<float> means = {1.0f, 0.9f, 0.95f, 0.92f};
  std::vector<std::vector<bool>> decisions(2);
  RunRanks(
      2,
      [&](int r) {
        WorkerOptions o = Options("es", r, 2, Strategy::kZero1);
        o.early_stopping.patience = 2;
        return o;
      },
      [&](int r, Worker* w) {
        for (float m : means) {
          const float mine = r == 0 ? m - 0.5f : m + 0.5f;  // rank 0 alone always improves
          auto stop = w->ReportMetric(mine);
          ASSERT_TRUE(stop.ok()) << stop.status();
          decisions[r].push_back(*stop);
        }
        EXPECT_TRUE(w->ShouldEarlyStop());
        EXPECT_NEAR(*w->early_stopping().best(), 0.9, 1e-6);
      });
  EXPECT_EQ(decisions[0], (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(decisions[1], decisions[0]);
  // A hook decides instead of the rule.
  RunRanks(
      2,
      [&](int r) {
        WorkerOptions o = Options("es-hook", r, 2, Strategy::kDdp);
        o.early_stop_hook = [](double mean, const EarlyStopping&) { return mean < 0.5; };
        return o;
      },
      [&](int r, Worker* w) {
        auto stop = w->ReportMetric(r == 0 ? 0.2f : 1.0f);  // mean 0.6
        ASSERT_TRUE(stop.ok());
        EXPECT_FALSE(*stop);
        stop = w->ReportMetric(r == 0 ? 0.2f : 0.6f);  // mean 0.4
        ASSERT_TRUE(stop.ok());
        EXPECT_TRUE(*stop);
      });
}

}  // namespace
}  // namespace tessel
