// Payload integrity end to end (issue 42 part 4): the same jobs trained
// through shard servers that tag headers only and through servers that tag
// payloads too (--data_integrity=payload) end bitwise equal: zero2 with
// buckets handed over early, ddp in bf16 on the wire, fsdp units pushed as
// micro-batch parts, and host aggregation over two hosts (pushes to the
// bucket's aggregator and its forwarded PARAMS under the host group's
// payload key). Over UCX, so pushes read in place are checked in place.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kSteps = 3;
const std::vector<TensorDesc> kTensors = MlpTensors(37, 11, 19);

size_t NumParams() { return NumElements(kTensors); }

std::vector<float> Init() { return SineInit(NumParams()); }

struct Config {
  std::string name;
  Strategy strategy = Strategy::kZero2;
  int world = 2;
  Precision precision = Precision::kFp32;
  std::vector<std::string> hosts;  // host aggregation when set
  int parts = 0;                   // fsdp: micro-batch parts per unit
};

std::vector<float> Train(InProcCluster& cluster, const Config& c) {
  std::vector<std::vector<float>> out(static_cast<size_t>(c.world));
  OnRanks(c.world, [&](int r) {
    WorkerOptions o = cluster.worker_options(c.name, r, c.world);
    o.strategy = c.strategy;
    o.bucket_bytes = 512;  // several buckets per shard
    o.precision = c.precision;
    if (!c.hosts.empty()) {
      o.aggregation = Aggregation::kHost;
      o.host_id = c.hosts[static_cast<size_t>(r)];
    }
    if (c.strategy == Strategy::kFsdp) o.fsdp_units = {0, 2};
    auto w = Worker::Connect(o);
    ASSERT_TRUE(w.ok()) << w.status();
    Worker& worker = **w;
    ASSERT_TRUE(worker.RegisterLayout(kTensors, Init()).ok());
    EXPECT_TRUE(worker.data_path_authenticated());
    for (int64_t s = 0; s < kSteps; ++s) {
      if (c.strategy == Strategy::kFsdp) {
        for (int u = 0; u < worker.num_units(); ++u) {
          auto p = worker.Gather(u);
          ASSERT_TRUE(p.ok()) << p.status();
          const std::vector<float> params(p->begin(), p->end());
          const Range range = worker.unit_range(u);
          worker.Release(u);
          for (int part = 0; part <= c.parts; ++part) {
            absl::Span<float> g = worker.UnitGrads(u);
            for (size_t i = 0; i < g.size(); ++i) {
              g[i] = TestGrad(r + part, s, static_cast<size_t>(range.begin) + i, params[i]);
            }
            absl::Status st = part < c.parts ? worker.PushUnitPart(u) : worker.PushUnit(u);
            ASSERT_TRUE(st.ok()) << st;
          }
        }
        ASSERT_TRUE(worker.FinishStep().ok());
      } else if (c.precision != Precision::kFp32) {
        absl::Span<uint16_t> p = worker.half_params();
        absl::Span<uint16_t> g = worker.half_grads();
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = static_cast<uint16_t>((p[i] ^ (r * 131 + s * 7 + i)) & 0x3bff);
        }
        absl::Status st = worker.Step();
        ASSERT_TRUE(st.ok()) << st;
      } else {
        absl::Status st = StepWithTestGrads(worker, r, s);
        ASSERT_TRUE(st.ok()) << st;
      }
    }
    auto all = worker.GatherAll();
    ASSERT_TRUE(all.ok()) << all.status();
    out[static_cast<size_t>(r)] = std::move(*all);
  });
  for (int r = 1; r < c.world; ++r) EXPECT_EQ(out[r], out[0]) << c.name << ": rank " << r;
  return out[0];
}

TEST(PayloadIntegrityWorkerTest, TrainingWithPayloadTagsIsBitwiseTrainingWithout) {
  auto config = [](std::string name, Strategy strategy) {
    Config c;
    c.name = std::move(name);
    c.strategy = strategy;
    return c;
  };
  std::vector<Config> configs = {
      config("zero2", Strategy::kZero2), config("ddp-bf16", Strategy::kDdp),
      config("fsdp-parts", Strategy::kFsdp), config("zero2-hosts", Strategy::kZero2)};
  configs[1].precision = Precision::kBf16;
  configs[2].parts = 2;
  configs[3].world = 4;
  configs[3].hosts = {"a", "a", "b", "b"};
  std::vector<std::vector<float>> results[2];
  for (bool payload : {false, true}) {
    InProcCluster::Options options;
    options.transport = InProcCluster::Kind::kUcx;
    options.data_auth_everywhere = true;
    options.data_integrity_payload = payload;
    InProcCluster cluster(options);
    ASSERT_TRUE(cluster.Start().ok());
    for (const Config& c : configs) results[payload].push_back(Train(cluster, c));
    cluster.Stop();
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    ASSERT_EQ(results[0][i].size(), NumParams()) << configs[i].name;
    ASSERT_EQ(results[1][i].size(), NumParams()) << configs[i].name;
    for (size_t j = 0; j < NumParams(); ++j) {
      ASSERT_EQ(std::memcmp(&results[0][i][j], &results[1][i][j], 4), 0)
          << configs[i].name << ": parameter " << j;
    }
    EXPECT_NE(results[1][i], Init()) << configs[i].name << " trained";
  }
}

}  // namespace
}  // namespace tessel
