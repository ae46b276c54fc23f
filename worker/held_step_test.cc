// Held steps (clipping by the job-wide gradient norm, worker.h; server/
// step_hold.h) over an in-process cluster of two shard servers (one
// authenticating frames), two ranks: the norm the servers measure is the
// mean gradient's, the same bits on every rank; a step held and released
// with a multiplier trains bitwise as a step whose settings carry that
// multiplier (zero2 with Adam, several buckets; fsdp by units); a held step
// not released by hand is released by Step() and trains as an unheld one;
// misuse is refused and names what to do.
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/train_state.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 3;
const std::vector<TensorDesc> kTensors = MlpTensors(41, 13, 17);

enum class Mode {
  kHeld,         // hold, measure, release with the clipping factor
  kSettings,     // no hold: the factor as the step's grad_scale (SetOptimizer)
  kAutoRelease,  // hold, never released by hand (Step() releases with 0)
  kPlain,        // no hold, no factor
};

struct TrainRun {
  std::vector<float> state;      // masters and optimizer state, rank 0
  std::vector<float> factors;    // per step (kHeld)
  std::vector<double> norms;     // per step and rank: the servers' norm
  std::vector<double> expected;  // per step: the mean gradient's norm, computed here
};

// The factor torch's clip_grad_norm_ takes for `norm` with max_norm 0.05.
float ClipFactor(double norm) { return static_cast<float>(0.05 / (norm + 1e-6)); }

// One fsdp unit's or the whole model's gradients of rank r at `step`.
void FillGrads(absl::Span<float> g, absl::Span<const float> p, int r, int64_t step,
               int64_t offset) {
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = TestGrad(r, step, static_cast<size_t>(offset) + i, p[i]);
  }
}

TrainRun Train(InProcCluster& cluster, const std::string& name, Strategy strategy, Mode mode,
               const std::vector<float>& factors = {}) {
  TrainRun run;
  run.norms.assign(kSteps * kWorld, 0);
  run.factors.assign(kSteps, 0);
  run.expected.assign(kSteps, 0);
  std::vector<std::vector<float>> out(kWorld);
  OnRanks(kWorld, [&](int r) {
    WorkerOptions o = cluster.worker_options(name, r, kWorld);
    o.strategy = strategy;
    o.bucket_bytes = 256;  // several buckets per shard
    o.optimizer = TestAdam();
    if (strategy == Strategy::kFsdp) o.fsdp_units = {0, 2};
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    const size_t n = NumElements(kTensors);
    ASSERT_TRUE(worker.RegisterLayout(kTensors, SineInit(n)).ok());
    const bool hold = mode == Mode::kHeld || mode == Mode::kAutoRelease;
    ASSERT_TRUE(worker.HoldUpdates(hold).ok());
    for (int64_t s = 0; s < kSteps; ++s) {
      if (mode == Mode::kSettings) {
        OptimizerParams scaled = TestAdam();
        scaled.grad_scale = factors[static_cast<size_t>(s)];
        ASSERT_TRUE(worker.SetOptimizer(scaled).ok());
      }
      // The full parameters, for the expected mean gradient's norm.
      std::vector<float> params;
      if (strategy == Strategy::kFsdp) {
        auto all = worker.GatherAll();
        ASSERT_TRUE(all.ok()) << all.status();
        params = *all;
        for (int u = 0; u < worker.num_units(); ++u) {
          const Range range = worker.unit_range(u);
          auto p = worker.Gather(u);
          ASSERT_TRUE(p.ok()) << p.status();
          std::vector<float> copy(p->begin(), p->end());
          worker.Release(u);
          FillGrads(worker.UnitGrads(u), copy, r, s, range.begin);
          ASSERT_TRUE(worker.PushUnit(u).ok());
        }
      } else {
        params.assign(worker.params().begin(), worker.params().end());
        FillGrads(worker.grads(), worker.params(), r, s, 0);
        ASSERT_TRUE(worker.GradientsReady(0, static_cast<int64_t>(n) / 3).ok());
      }
      if (mode == Mode::kHeld) {
        absl::StatusOr<GradNormStats> stats = worker.HeldGradientNorm();
        ASSERT_TRUE(stats.ok()) << stats.status();
        const double norm = NormOf(*stats, 2.0);
        run.norms[static_cast<size_t>(s * kWorld + r)] = norm;
        if (r == 0) {
          double sq = 0;
          for (size_t i = 0; i < n; ++i) {
            const float mean = (TestGrad(0, s, i, params[i]) + TestGrad(1, s, i, params[i])) / 2.0f;
            sq += double{mean} * mean;
          }
          run.expected[static_cast<size_t>(s)] = std::sqrt(sq);
          run.factors[static_cast<size_t>(s)] = ClipFactor(norm);
        }
        absl::Status released = worker.ReleaseStep(ClipFactor(norm));
        ASSERT_TRUE(released.ok()) << released;
        EXPECT_TRUE(absl::IsFailedPrecondition(worker.ReleaseStep(ClipFactor(norm))))
            << "a step is released once";
      }
      absl::Status stepped = strategy == Strategy::kFsdp ? worker.FinishStep() : worker.Step();
      ASSERT_TRUE(stepped.ok()) << stepped;
    }
    absl::StatusOr<std::vector<float>> state = TrainingStateValues(worker);
    ASSERT_TRUE(state.ok()) << state.status();
    out[static_cast<size_t>(r)] = std::move(*state);
  });
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(out[r], out[0]) << name << ": rank " << r;
  run.state = out[0];
  return run;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class HeldStepTest : public ::testing::TestWithParam<Strategy> {};

TEST_P(HeldStepTest, AHeldStepIsMeasuredByTheServersAndAppliedWithItsFactor) {
  InProcCluster cluster{InProcCluster::Options{}};
  ASSERT_TRUE(cluster.Start().ok());
  const std::string s = GetParam() == Strategy::kFsdp ? "fsdp" : "zero2";
  const TrainRun held = Train(cluster, "held-" + s, GetParam(), Mode::kHeld);
  for (int64_t step = 0; step < kSteps; ++step) {
    const double a = held.norms[static_cast<size_t>(step * kWorld)];
    const double b = held.norms[static_cast<size_t>(step * kWorld + 1)];
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "every rank gets the same bits, step " << step;
    EXPECT_NEAR(a, held.expected[static_cast<size_t>(step)], 1e-6 * a) << "step " << step;
    EXPECT_LT(held.factors[static_cast<size_t>(step)], 1.0f) << "the test clips every step";
  }
  const TrainRun settings =
      Train(cluster, "settings-" + s, GetParam(), Mode::kSettings, held.factors);
  EXPECT_TRUE(SameBits(held.state, settings.state))
      << "held and released = the factor as the step's grad_scale";
  const TrainRun plain = Train(cluster, "plain-" + s, GetParam(), Mode::kPlain);
  EXPECT_FALSE(SameBits(held.state, plain.state)) << "clipping changed the run";
  const TrainRun autoreleased = Train(cluster, "auto-" + s, GetParam(), Mode::kAutoRelease);
  EXPECT_TRUE(SameBits(autoreleased.state, plain.state))
      << "a held step Step() releases trains as an unheld one";
  cluster.Stop();
}

INSTANTIATE_TEST_SUITE_P(Strategies, HeldStepTest,
                         ::testing::Values(Strategy::kZero2, Strategy::kFsdp),
                         [](const ::testing::TestParamInfo<Strategy>& i) {
                           return std::string(i.param == Strategy::kFsdp ? "Fsdp" : "Zero2");
                         });

TEST(HeldStepMisuseTest, RefusedWithWhatToDo) {
  InProcCluster cluster{InProcCluster::Options{}};
  ASSERT_TRUE(cluster.Start().ok());
  OnRanks(1, [&](int r) {
    WorkerOptions o = cluster.worker_options("misuse", r, 1);
    o.strategy = Strategy::kZero2;
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    const size_t n = NumElements(kTensors);
    ASSERT_TRUE(worker.RegisterLayout(kTensors, SineInit(n)).ok());
    absl::StatusOr<GradNormStats> unheld = worker.HeldGradientNorm();
    EXPECT_TRUE(absl::IsFailedPrecondition(unheld.status()));
    EXPECT_NE(unheld.status().message().find("HoldUpdates(true)"), std::string::npos);
    EXPECT_TRUE(absl::IsFailedPrecondition(worker.ReleaseStep(0.5f)));
    ASSERT_TRUE(worker.HoldUpdates(true).ok());
    EXPECT_TRUE(absl::IsInvalidArgument(worker.ReleaseStep(-1.0f)));
    EXPECT_TRUE(absl::IsInvalidArgument(worker.ReleaseStep(std::nanf(""))));
    ASSERT_TRUE(StepWithTestGrads(worker, r, 0).ok()) << "released by Step()";
  });
  OnRanks(1, [&](int r) {
    WorkerOptions o = cluster.worker_options("misuse-ddp", r, 1);
    o.strategy = Strategy::kDdp;
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->RegisterLayout(kTensors, SineInit(NumElements(kTensors))).ok());
    absl::Status s = (*w)->HoldUpdates(true);
    EXPECT_TRUE(absl::IsFailedPrecondition(s));
    EXPECT_NE(s.message().find("ddp"), std::string::npos);
  });
  cluster.Stop();
}

// Rank 0's pushes decide (rank 1 waits); rank 1's, disagreeing, are refused
// with an ERROR it can read: a held PUSH's refusal must not echo its flags
// (an ERROR with flags is undecodable, and rank 1 would wait for its step's
// timeout instead; found by the data_plane fuzzer).
TEST(HeldStepMisuseTest, RanksThatDisagreeOnHoldingAreRefusedNamingTheRule) {
  for (bool first_holds : {true, false}) {
    SCOPED_TRACE(first_holds ? "rank 0 holds" : "rank 1 holds");
    InProcCluster cluster{InProcCluster::Options{}};
    ASSERT_TRUE(cluster.Start().ok());
    std::vector<absl::Status> got(kWorld);
    OnRanks(kWorld, [&](int r) {
      WorkerOptions o = cluster.worker_options("disagree", r, kWorld);
      o.strategy = Strategy::kZero2;
      o.step_timeout = absl::Seconds(20);
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(kTensors, SineInit(NumElements(kTensors))).ok());
      ASSERT_TRUE(worker.HoldUpdates((r == 0) == first_holds).ok());
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 decides
      const absl::Time start = absl::Now();
      got[static_cast<size_t>(r)] = StepWithTestGrads(worker, r, 0);
      if (r == 1) {
        EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "refused at once, not timed out";
      }
    });
    EXPECT_TRUE(absl::IsFailedPrecondition(got[1])) << got[1];
    EXPECT_NE(got[1].message().find("every rank must clip the same steps"), std::string::npos)
        << got[1];
    EXPECT_FALSE(got[0].ok()) << "the step cannot complete";
    cluster.Stop();
  }
}

}  // namespace
}  // namespace tessel
