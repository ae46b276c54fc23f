// A lost worker without rollback (worker/internal/rejoin.h; issue 44 item 1)
// over an in-process cluster of two shard servers (one authenticating
// frames, so the replacement needs the rank key handover), two ranks, zero2
// with Adam, zero1 in bf16 and fsdp (a unit per layer), buckets of 256 bytes. Rank 1 hands part of
// its gradient of step 4 over (some buckets pushed), or nothing, or all of
// it and waits, then dies (its Worker is destroyed); a replacement started
// with `resume` rejoins in place: step() is 3 (the step the shards applied;
// 4 where every push of step 4 had landed, so the shards finished it),
// rejoined_in_place() holds, it recomputes step 4 and pushes only what the
// shards lack; rank 0 waits inside its Step() and makes no recovery. Both
// end bitwise where a run without the death ends: parameters, masters and
// optimizer state.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/precision.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int64_t kSteps = 6;
constexpr int64_t kDiesIn = 3;  // 0-based: the step rank 1's first process dies in
const std::vector<TensorDesc> kTensors = MlpTensors(41, 13, 17);

// How much of step kDiesIn rank 1 handed over before dying.
enum class DiesAfter { kNothing, kSomeBuckets, kEverything };

struct Case {
  Strategy strategy;
  Precision precision;
  DiesAfter dies;
};

struct Ended {
  std::vector<float> state;  // rank 0's masters and optimizer state
  std::vector<std::vector<float>> params;
  int rank0_recoveries = -1;
  bool rejoined = false;
  int64_t resumed_at = -1;
};

WorkerOptions Options(const InProcCluster& cluster, const std::string& job, int rank,
                      const Case& c) {
  WorkerOptions o = cluster.worker_options(job, rank, kWorld);
  o.strategy = c.strategy;
  o.precision = c.precision;
  o.bucket_bytes = 256;  // several buckets per shard
  o.optimizer = TestAdam();
  if (c.strategy == Strategy::kFsdp) o.fsdp_units = {0, 2};  // a unit per layer
  o.recovery = true;
  o.recovery_timeout = absl::Seconds(30);
  return o;
}

// Rank r's gradients of `step` written into the worker's buffer (fp32, or
// half under mixed precision: the half parameters read as floats).
void WriteGrads(Worker& worker, int rank, int64_t step) {
  if (worker.options().precision == Precision::kFp32) {
    absl::Span<float> p = worker.params();
    absl::Span<float> g = worker.grads();
    for (size_t i = 0; i < g.size(); ++i) g[i] = TestGrad(rank, step, i, p[i]);
    return;
  }
  const HalfType t = HalfType::kBF16;
  absl::Span<uint16_t> hp = worker.half_params();
  std::vector<float> p(hp.size()), g(hp.size());
  HalfToFloat(t, hp.data(), p.data(), p.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = TestGrad(rank, step, i, p[i]);
  FloatToHalf(t, g.data(), worker.half_grads().data(), g.size());
}

// fsdp: units 0 .. `units` - 1 gathered, their gradients written and pushed.
absl::Status PushUnits(Worker& worker, int rank, int64_t step, int units) {
  for (int u = 0; u < units; ++u) {
    const Range range = worker.unit_range(u);
    TESSEL_ASSIGN_OR_RETURN(absl::Span<const float> p, worker.Gather(u));
    std::vector<float> copy(p.begin(), p.end());
    worker.Release(u);
    absl::Span<float> g = worker.UnitGrads(u);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = TestGrad(rank, step, static_cast<size_t>(range.begin) + i, copy[i]);
    }
    TESSEL_RETURN_IF_ERROR(worker.PushUnit(u));
  }
  return absl::OkStatus();
}

absl::Status Step(Worker& worker, int rank, int64_t step) {
  if (worker.options().strategy == Strategy::kFsdp) {
    TESSEL_RETURN_IF_ERROR(PushUnits(worker, rank, step, worker.num_units()));
    return worker.FinishStep();
  }
  WriteGrads(worker, rank, step);
  const int64_t n = static_cast<int64_t>(worker.layout().num_params());
  TESSEL_RETURN_IF_ERROR(worker.GradientsReady(0, n / 3));
  return worker.Step();
}

Ended Train(InProcCluster& cluster, const std::string& job, const Case& c, bool die) {
  Ended out;
  // No rank leaves before every rank has read its results: a rank that left
  // is a lost worker to the others, whose reads would wait for it.
  std::atomic<int> finished{0};
  out.params.resize(kWorld);
  const size_t n = NumElements(kTensors);
  OnRanks(kWorld, [&](int r) {
    auto w = Worker::Connect(Options(cluster, job, r, c));
    ASSERT_TRUE(w.ok()) << w.status();
    std::unique_ptr<Worker> worker = std::move(*w);
    ASSERT_TRUE(worker->RegisterLayout(kTensors, SineInit(n)).ok());
    for (int64_t s = worker->step(); s < kSteps; s = worker->step()) {
      if (die && r == 1 && s == kDiesIn && !out.rejoined) {
        // Hand over what this case says, let it land, and die mid-step.
        if (c.dies != DiesAfter::kNothing && c.strategy == Strategy::kFsdp) {
          const int units = worker->num_units();
          ASSERT_TRUE(
              PushUnits(*worker, r, s, c.dies == DiesAfter::kEverything ? units : units / 2).ok());
          absl::SleepFor(absl::Milliseconds(300));
        } else if (c.dies != DiesAfter::kNothing) {
          WriteGrads(*worker, r, s);
          const int64_t all = static_cast<int64_t>(n);
          const int64_t upto = c.dies == DiesAfter::kEverything ? all : all / 2;
          ASSERT_TRUE(worker->GradientsReady(0, upto).ok());
          absl::SleepFor(absl::Milliseconds(300));
        }
        worker.reset();  // leaves the registry: rank 0's step waits in place
        absl::SleepFor(absl::Milliseconds(500));
        WorkerOptions o = Options(cluster, job, r, c);
        o.resume = true;
        auto again = Worker::Connect(o);
        ASSERT_TRUE(again.ok()) << again.status();
        worker = std::move(*again);
        ASSERT_TRUE(worker->RegisterLayout(kTensors, {}).ok());
        out.rejoined = worker->rejoined_in_place();
        out.resumed_at = worker->step();
        if (!out.rejoined) return;
        continue;
      }
      absl::Status st = Step(*worker, r, s);
      if (Worker::IsRecoverable(st)) st = worker->Recover();
      ASSERT_TRUE(st.ok()) << "rank " << r << " step " << s << ": " << st;
    }
    auto params = worker->GatherAll();
    ASSERT_TRUE(params.ok()) << params.status();
    out.params[r] = *params;
    auto state = TrainingStateValues(*worker);  // a collective: every rank
    ASSERT_TRUE(state.ok()) << state.status();
    if (r == 0) {
      out.state = *state;
      out.rank0_recoveries = worker->recoveries();
    }
    finished.fetch_add(1);
    while (finished.load() < kWorld) absl::SleepFor(absl::Milliseconds(5));
  });
  return out;
}

class RejoinWorkerTest : public testing::TestWithParam<Case> {};

TEST_P(RejoinWorkerTest, TheReplacementRejoinsTheStepInFlightAndTheRunIsBitwiseTheCleanOne) {
  const Case c = GetParam();
  InProcCluster cluster{InProcCluster::Options{}};
  ASSERT_TRUE(cluster.Start().ok());
  const Ended clean = Train(cluster, "clean", c, /*die=*/false);
  ASSERT_FALSE(clean.state.empty());
  const Ended faulty = Train(cluster, "faulty", c, /*die=*/true);
  EXPECT_TRUE(faulty.rejoined) << "the replacement did not rejoin in place";
  // Every push of the step in flight landed: the shards finished it without
  // the dead process, and the replacement goes on from there.
  EXPECT_EQ(faulty.resumed_at, c.dies == DiesAfter::kEverything ? kDiesIn + 1 : kDiesIn)
      << "it should resume at the step the shards applied";
  EXPECT_EQ(faulty.rank0_recoveries, 0) << "the survivor rolled back";
  ASSERT_FALSE(faulty.state.empty());
  ExpectParamsEqual(faulty.state, clean.state);
  ExpectEveryRankEqual(faulty.params, clean.params[0]);
  cluster.Stop();
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  static const char* const kDies[] = {"Nothing", "SomeBuckets", "Everything"};
  const Strategy s = info.param.strategy;
  return absl::StrCat(s == Strategy::kZero2   ? "Zero2"
                      : s == Strategy::kZero1 ? "Zero1"
                                              : "Fsdp",
                      info.param.precision == Precision::kFp32 ? "Fp32" : "Bf16", "Pushed",
                      kDies[static_cast<int>(info.param.dies)]);
}

INSTANTIATE_TEST_SUITE_P(
    Deaths, RejoinWorkerTest,
    testing::Values(Case{Strategy::kZero2, Precision::kFp32, DiesAfter::kNothing},
                    Case{Strategy::kZero2, Precision::kFp32, DiesAfter::kSomeBuckets},
                    Case{Strategy::kZero2, Precision::kFp32, DiesAfter::kEverything},
                    Case{Strategy::kZero1, Precision::kBf16, DiesAfter::kSomeBuckets},
                    Case{Strategy::kFsdp, Precision::kFp32, DiesAfter::kSomeBuckets},
                    Case{Strategy::kFsdp, Precision::kFp32, DiesAfter::kEverything}),
    CaseName);

}  // namespace
}  // namespace tessel
