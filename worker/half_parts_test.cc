// Half-precision fsdp micro-batch parts (issue 43, item 6): bf16 and fp16
// units pushed as no_sync() parts are summed by the shard servers in the
// half type, each add rounded as a rank's own in-place `grad += g` rounds,
// so training ends bitwise where accumulating on the worker ends (2 ranks,
// 3 micro-batches, 3 steps); and apart from where a sum kept in fp32 and
// rounded once would (the test tells the two apart).
#include <cstring>
#include <string>
#include <vector>

#include "core/precision.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/train_state.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 3;
constexpr int kMicro = 3;
const std::vector<TensorDesc> kTensors = MlpTensors(37, 11, 19);

size_t NumParams() { return NumElements(kTensors); }

std::vector<float> Init() { return SineInit(NumParams()); }

enum class Mode {
  kWorker,  // each micro-batch added into the unit's half buffer in place, one push
  kParts,   // each micro-batch a part, summed by the servers
  kWide,    // accumulated in fp32 on the worker, rounded to half once (not torch's)
};

std::vector<float> Train(InProcCluster& cluster, const std::string& name, Precision precision,
                         Mode mode) {
  const HalfType t = precision == Precision::kFp16 ? HalfType::kF16 : HalfType::kBF16;
  std::vector<std::vector<float>> out(kWorld);
  OnRanks(kWorld, [&](int r) {
    WorkerOptions o = cluster.worker_options(name, r, kWorld);
    o.strategy = Strategy::kFsdp;
    o.bucket_bytes = 256;  // several buckets per shard
    o.precision = precision;
    o.fsdp_units = {0, 2};
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
    for (int64_t s = 0; s < kSteps; ++s) {
      for (int u = 0; u < worker.num_units(); ++u) {
        auto p = worker.GatherHalf(u);
        ASSERT_TRUE(p.ok()) << p.status();
        std::vector<float> params(p->size());
        HalfToFloat(t, p->data(), params.data(), params.size());
        const Range range = worker.unit_range(u);
        worker.Release(u);
        std::vector<uint16_t> g(params.size());
        std::vector<float> wide(params.size(), 0.f);
        absl::Span<uint16_t> buffer;
        for (int m = 0; m < kMicro; ++m) {
          std::vector<float> f(params.size());
          for (size_t i = 0; i < f.size(); ++i) {
            f[i] = TestMicroBatchGrad(r, s, m, static_cast<size_t>(range.begin) + i, params[i]);
          }
          FloatToHalf(t, f.data(), g.data(), g.size());  // this pass's half gradient
          if (mode == Mode::kParts) {
            buffer = worker.UnitHalfGrads(u);
            ASSERT_EQ(buffer.size(), g.size());
            std::copy(g.begin(), g.end(), buffer.begin());
            absl::Status st = m + 1 < kMicro ? worker.PushUnitPart(u) : worker.PushUnit(u);
            ASSERT_TRUE(st.ok()) << st;
            continue;
          }
          if (mode == Mode::kWide) {
            std::vector<float> back(g.size());
            HalfToFloat(t, g.data(), back.data(), back.size());
            for (size_t i = 0; i < g.size(); ++i) wide[i] += back[i];
            continue;
          }
          // torch: the first pass's gradient becomes .grad, later ones are
          // added into it in place (each add rounded to half).
          buffer = worker.UnitHalfGrads(u);
          for (size_t i = 0; i < g.size(); ++i) {
            const float a = t == HalfType::kF16 ? F16ToFloat(buffer[i]) : BF16ToFloat(buffer[i]);
            const float b = t == HalfType::kF16 ? F16ToFloat(g[i]) : BF16ToFloat(g[i]);
            buffer[i] =
                m == 0 ? g[i] : (t == HalfType::kF16 ? FloatToF16(a + b) : FloatToBF16(a + b));
          }
        }
        if (mode == Mode::kWide) {
          buffer = worker.UnitHalfGrads(u);
          FloatToHalf(t, wide.data(), buffer.data(), buffer.size());
        }
        if (mode != Mode::kParts) {
          absl::Status st = worker.PushUnit(u);
          ASSERT_TRUE(st.ok()) << st;
        }
      }
      ASSERT_TRUE(worker.FinishStep().ok());
    }
    // The fp32 masters and optimizer state (the half parameters a worker
    // gathers would hide a gradient's last bits).
    absl::StatusOr<std::vector<float>> state = TrainingStateValues(worker);
    ASSERT_TRUE(state.ok()) << state.status();
    out[static_cast<size_t>(r)] = std::move(*state);
  });
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(out[r], out[0]) << name << ": rank " << r;
  return out[0];
}

// Elements at which two training states (masters, then optimizer state) differ.
int64_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

TEST(HalfPartsTest, HalfPartsSummedOnTheServersAreBitwiseTheWorkersAccumulation) {
  InProcCluster cluster{InProcCluster::Options{}};
  ASSERT_TRUE(cluster.Start().ok());
  for (Precision precision : {Precision::kBf16, Precision::kFp16}) {
    const std::string p = precision == Precision::kBf16 ? "bf16" : "fp16";
    SCOPED_TRACE(p);
    const std::vector<float> worker = Train(cluster, "worker-" + p, precision, Mode::kWorker);
    const std::vector<float> parts = Train(cluster, "parts-" + p, precision, Mode::kParts);
    const std::vector<float> wide = Train(cluster, "wide-" + p, precision, Mode::kWide);
    ASSERT_GE(worker.size(), NumParams());
    EXPECT_EQ(Differing(parts, worker), 0) << "state bytes differing from worker accumulation";
    EXPECT_GT(Differing(wide, worker), 0) << "the test must tell half adds from one fp32 sum";
  }
  cluster.Stop();
}

}  // namespace
}  // namespace tessel
