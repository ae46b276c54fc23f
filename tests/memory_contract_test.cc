// The memory contract: what each strategy keeps where, checked against the
// bytes the worker SDK and the shard servers account for (worker
// memory() and the servers' GetStats), within 10%.
//
// Real shard server processes over UCX; the workers are Worker objects on
// threads of this process (each with its own UCX endpoint and lease).
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/local_cluster.h"
#include "worker/worker.h"

namespace tessel {
namespace {

constexpr int kWorkers = 2;
constexpr int kServers = 2;
constexpr int64_t kUnit = 50000;  // 4 tensors (= 4 fsdp units) of 50k params
constexpr int64_t kParams = 4 * kUnit;

struct Measured {
  WorkerMemory worker;
  int64_t server_params = 0, server_optimizer = 0, server_grads = 0;
};

// ZeRO jobs run with recovery on, as tessel-train's and tessel.torch's do by
// default: their shards keep two served versions for a replacement worker to
// rejoin in place, unless `rejoin` is false (JobSpec.in_place_update: one).
Measured RunJob(Strategy strategy, const std::string& job, Precision precision = Precision::kFp32,
                bool rejoin = true) {
  ClusterOptions copt;
  copt.servers = kServers;
  copt.run_dir = MakeRunDir("memory");
  LocalCluster cluster(copt);
  absl::Status started = cluster.Start();
  EXPECT_TRUE(started.ok()) << started;
  std::vector<Measured> out(kWorkers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      WorkerOptions o;
      o.registry = cluster.registry_address();
      o.token = cluster.WorkerToken();
      o.job = job;
      o.rank = r;
      o.world_size = kWorkers;
      o.num_servers = kServers;
      o.strategy = strategy;
      o.optimizer.kind = OptimizerParams::Kind::kAdam;
      o.ucx.tls = "posix,sysv,self";
      if (strategy == Strategy::kFsdp || strategy == Strategy::kZero2) {
        o.fsdp_units = {0, 1, 2, 3};
      }
      o.precision = precision;
      o.recovery = strategy != Strategy::kDdp;
      o.rejoin_in_place = rejoin;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      std::vector<TensorDesc> tensors;
      for (int t = 0; t < 4; ++t) tensors.push_back({absl::StrCat("t", t), {kUnit}});
      std::vector<float> init(kParams, 0.5f);
      ASSERT_TRUE((*w)->RegisterLayout(tensors, init).ok());
      for (int step = 0; step < 2; ++step) {
        if (strategy == Strategy::kZero2) {
          for (int u = 3; u >= 0; --u) {  // backward: each unit's grads pushed and freed
            if (precision == Precision::kFp32) {
              std::fill((*w)->UnitGrads(u).begin(), (*w)->UnitGrads(u).end(), 0.01f);
            } else {
              std::fill((*w)->UnitHalfGrads(u).begin(), (*w)->UnitHalfGrads(u).end(), 0x2000);
            }
            ASSERT_TRUE((*w)->PushUnit(u).ok());
          }
          ASSERT_TRUE((*w)->Step().ok());
        } else if (strategy == Strategy::kFsdp) {
          ASSERT_TRUE((*w)->Prefetch(0).ok());
          const bool half = precision != Precision::kFp32;
          auto gather = [&](int u) {
            return half ? (*w)->GatherHalf(u).status() : (*w)->Gather(u).status();
          };
          for (int u = 0; u < 4; ++u) {  // forward: gather, prefetch the next, release
            ASSERT_TRUE(gather(u).ok());
            if (u < 3) {
              ASSERT_TRUE((*w)->Prefetch(u + 1).ok());
            }
            (*w)->Release(u);
          }
          ASSERT_TRUE((*w)->Prefetch(3).ok());
          for (int u = 3; u >= 0; --u) {
            ASSERT_TRUE(gather(u).ok());
            if (u > 0) {
              ASSERT_TRUE((*w)->Prefetch(u - 1).ok());
            }
            if (half) {
              std::fill((*w)->UnitHalfGrads(u).begin(), (*w)->UnitHalfGrads(u).end(), 0x2000);
            } else {
              std::fill((*w)->UnitGrads(u).begin(), (*w)->UnitGrads(u).end(), 0.01f);
            }
            (*w)->Release(u);
            ASSERT_TRUE((*w)->PushUnit(u).ok());
          }
          ASSERT_TRUE((*w)->FinishStep().ok());
        } else {
          if (precision != Precision::kFp32) {
            std::fill((*w)->half_grads().begin(), (*w)->half_grads().end(), 0x2000);
          } else {
            std::fill((*w)->grads().begin(), (*w)->grads().end(), 0.01f);
          }
          ASSERT_TRUE((*w)->Step().ok());
        }
      }
      out[r].worker = (*w)->memory();
      if (r == 0) {
        auto stats = (*w)->ServerStats();
        ASSERT_TRUE(stats.ok()) << stats.status();
        for (const auto& st : *stats) {
          out[0].server_params += st.params_bytes;
          out[0].server_optimizer += st.optimizer_bytes;
          out[0].server_grads += st.grad_buffer_bytes;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  cluster.Stop();
  return out[0];
}

void ExpectNear(int64_t got, double want, const std::string& what) {
  EXPECT_NEAR(static_cast<double>(got), want, 0.1 * want + 1) << what;
}

TEST(MemoryContractTest, DdpKeepsSixteenBytesPerParamOnTheWorker) {
  Measured m = RunJob(Strategy::kDdp, "mem-ddp");
  ExpectNear(m.worker.params_bytes + m.worker.grads_bytes + m.worker.optimizer_bytes,
             16.0 * kParams, "DDP worker bytes (4 params + 4 grads + 8 Adam)");
  // Servers: only the averaged gradient; the workers' gradients are reduced
  // where they lie (zero-copy shared memory: no per-rank receive buffers).
  EXPECT_EQ(m.server_params, 0);
  EXPECT_EQ(m.server_optimizer, 0);
  ExpectNear(m.server_grads, 4.0 * kParams, "DDP server: the mean only (pushes read in place)");
}

TEST(MemoryContractTest, ZeroKeepsParamsOnTheWorkerAndStateOnServers) {
  for (auto strategy : {Strategy::kZero1, Strategy::kZero2}) {
    Measured m = RunJob(strategy, absl::StrCat("mem-z", static_cast<int>(strategy)));
    ExpectNear(m.worker.params_bytes, 4.0 * kParams, "fp32 params on the worker");
    if (strategy == Strategy::kZero1) {
      ExpectNear(m.worker.grads_bytes, 4.0 * kParams, "ZeRO-1: a full gradient buffer");
    } else {
      // ZeRO-2: gradients per unit, freed once pushed: none held between
      // steps, at most a unit or two (one still sending) at the peak.
      EXPECT_EQ(m.worker.grads_bytes, 0);
      EXPECT_GE(m.worker.peak_bytes, 4 * kUnit);
      EXPECT_LE(m.worker.peak_bytes, 2 * 4 * kUnit) << "ZeRO-2 holds at most two units of grads";
    }
    EXPECT_EQ(m.worker.optimizer_bytes, 0);
    ExpectNear(m.server_params, 8.0 * kParams,
               "fp32 masters of two served versions (the served one and the one before), summed "
               "over shards");
    ExpectNear(m.server_optimizer, 8.0 * kParams, "Adam state, summed over shards");
    if (strategy == Strategy::kZero1) {
      EXPECT_EQ(m.server_grads, 0) << "ZeRO-1 pushes are read in place: no receive buffers";
    } else {
      // Per-unit gradients are ordinary memory, copied: W receive buffers.
      ExpectNear(m.server_grads, 4.0 * kParams * kWorkers, "per-rank receive buffers");
    }
  }
}

// Mixed precision (the DeepSpeed paper's 2 + 2 + K breakdown, K = 12 for
// Adam: 4 fp32 masters + 8 state, here on the servers): ZeRO-1 keeps 2 + 2
// bytes per parameter on the worker, ZeRO-2 2 + per-unit half gradients; on
// the servers 4 + 2 x 2 (masters + the served half copies of two versions)
// + 8 + 2 W (half receive buffers; none where pushes are read in place, as
// ZeRO-1's full buffer is).
TEST(MemoryContractTest, MixedPrecisionKeepsHalfOnWorkersAndFp32OnServers) {
  for (auto strategy : {Strategy::kZero1, Strategy::kZero2}) {
    const Precision precision = strategy == Strategy::kZero1 ? Precision::kFp16 : Precision::kBf16;
    Measured m = RunJob(strategy, absl::StrCat("mem-mp", static_cast<int>(strategy)), precision);
    ExpectNear(m.worker.params_bytes, 2.0 * kParams, "half params on the worker");
    if (strategy == Strategy::kZero1) {
      ExpectNear(m.worker.grads_bytes, 2.0 * kParams, "ZeRO-1: a full half gradient buffer");
    } else {
      EXPECT_EQ(m.worker.grads_bytes, 0) << "ZeRO-2: half gradients per unit, freed once pushed";
      EXPECT_GE(m.worker.peak_bytes, 2 * kUnit);
      EXPECT_LE(m.worker.peak_bytes, 2 * 2 * kUnit);
    }
    ExpectNear(m.server_params, 8.0 * kParams, "fp32 masters + two versions' half copies");
    ExpectNear(m.server_optimizer, 8.0 * kParams, "fp32 Adam state");
    if (strategy == Strategy::kZero1) {
      EXPECT_EQ(m.server_grads, 0) << "half pushes read in place: no receive buffers";
    } else {
      ExpectNear(m.server_grads, 2.0 * kParams * kWorkers, "half receive buffers (units)");
    }
  }
}

// DDP under mixed precision: fp32 masters + Adam state on the worker (12)
// plus the half copies the model uses (2 + 2): the same 16 bytes per
// parameter, now (2 + 2 + K) with K = 12; servers hold the fp32 mean and its
// half copy (the half gradients are read in place: no receive buffers).
TEST(MemoryContractTest, MixedPrecisionDdpKeepsMastersOnTheWorker) {
  Measured m = RunJob(Strategy::kDdp, "mem-ddp-mp", Precision::kBf16);
  ExpectNear(m.worker.params_bytes, 6.0 * kParams, "fp32 masters + half params");
  ExpectNear(m.worker.grads_bytes, 2.0 * kParams, "half grads");
  ExpectNear(m.worker.optimizer_bytes, 8.0 * kParams, "fp32 Adam state");
  EXPECT_EQ(m.server_params, 0);
  EXPECT_EQ(m.server_optimizer, 0);
  ExpectNear(m.server_grads, 6.0 * kParams, "fp32 mean + half mean (pushes read in place)");
}

// FSDP under mixed precision: the worker holds half units only (half the
// fp32 peak); servers as for ZeRO mixed precision.
TEST(MemoryContractTest, MixedPrecisionFsdpHoldsHalfUnits) {
  Measured m = RunJob(Strategy::kFsdp, "mem-fsdp-mp", Precision::kFp16);
  EXPECT_EQ(m.worker.params_bytes, 0);
  EXPECT_EQ(m.worker.grads_bytes, 0);
  EXPECT_GE(m.worker.peak_bytes, 3 * 2 * kUnit) << "two units of half params + one of grads";
  EXPECT_LE(m.worker.peak_bytes, 4 * 2 * kUnit * 1.1) << "half of the fp32 peak";
  ExpectNear(m.server_params, 8.0 * kParams, "fp32 masters + two versions' served half copies");
  ExpectNear(m.server_optimizer, 8.0 * kParams, "fp32 Adam state");
  ExpectNear(m.server_grads, 2.0 * kParams * kWorkers, "half receive buffers");
}

// Without rejoining in place the shards keep one served version, updated in
// place: fp32 masters alone, or masters + one half copy.
TEST(MemoryContractTest, WithoutRejoinInPlaceTheServersKeepOneVersion) {
  Measured z = RunJob(Strategy::kZero2, "mem-z2-one", Precision::kFp32, /*rejoin=*/false);
  ExpectNear(z.server_params, 4.0 * kParams, "fp32 masters, one version");
  ExpectNear(z.server_optimizer, 8.0 * kParams, "Adam state");
  Measured f = RunJob(Strategy::kFsdp, "mem-fsdp-one", Precision::kBf16, /*rejoin=*/false);
  ExpectNear(f.server_params, 6.0 * kParams, "fp32 masters + one half copy");
}

TEST(MemoryContractTest, FsdpHoldsOnlyTheUnitsInUse) {
  Measured m = RunJob(Strategy::kFsdp, "mem-fsdp");
  // After the step nothing is held; at the peak, a gathered unit, the
  // prefetched next one and the unit's gradients (plus one still sending).
  EXPECT_EQ(m.worker.params_bytes, 0);
  EXPECT_EQ(m.worker.grads_bytes, 0);
  EXPECT_GE(m.worker.peak_bytes, 3 * 4 * kUnit) << "two units of params + one of grads";
  EXPECT_LE(m.worker.peak_bytes, 4 * 4 * kUnit * 1.1) << "well under the full model";
  ExpectNear(m.server_params, 8.0 * kParams, "fp32 masters of two served versions");
  ExpectNear(m.server_optimizer, 8.0 * kParams, "Adam state");
}

}  // namespace
}  // namespace tessel
