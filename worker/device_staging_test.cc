// A worker whose MLP computes on a device (DeviceMlp + DeviceStaging) trains
// exactly as the CPU path does: on the "host" device bit for bit, for ddp,
// zero1 and zero2, fp32 and bf16, and through a shard server's restart and
// the recovery that follows; on "cuda" (where a GPU is) within cuBLAS's
// tolerance. The gradient copies overlap backward.
#include "worker/device_staging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/layout.h"
#include "core/topk.h"
#include "gtest/gtest.h"
#include "model/dataset.h"
#include "model/device_mlp.h"
#include "model/mlp.h"
#include "testing/inproc_cluster.h"
#include "worker/train_state.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kBatch = 16;

struct Case {
  std::string device;
  Strategy strategy;
  Precision precision;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat(info.param.device, "_", StrategyName(info.param.strategy), "_",
                      PrecisionName(info.param.precision));
}

OptimizerParams Adam() {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kAdam;
  p.lr = 1e-2f;
  return p;
}

std::vector<TensorDesc> Tensors(const model::Mlp& m) {
  std::vector<TensorDesc> out;
  for (const auto& t : m.tensors()) out.push_back({t.name, t.shape});
  return out;
}

std::vector<Range> Layers(const model::Mlp& m) {
  std::vector<Range> out;
  for (int l = 0; l < m.num_layers(); ++l) {
    auto [off, n] = m.LayerRange(l);
    out.push_back({static_cast<int64_t>(off), static_cast<int64_t>(off + n)});
  }
  return out;
}

class DeviceStagingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto probe = gpu::OpenDevice(GetParam().device);
    if (!probe.ok()) GTEST_SKIP() << probe.status().message();
  }

  void StartCluster(const std::string& checkpoint_dir) {
    InProcCluster::Options options;
    options.servers = 2;
    options.checkpoint_dir = checkpoint_dir;
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
  }

  WorkerOptions Options(const std::string& job, int rank) {
    WorkerOptions o = cluster_->worker_options(job, rank, kWorld);
    o.strategy = GetParam().strategy;
    o.precision = GetParam().precision;
    o.optimizer = Adam();
    o.bucket_bytes = 4096;  // several buckets
    // A rank that fails an assertion stops stepping: its peer then fails its
    // step in seconds instead of hanging the test.
    o.step_timeout = absl::Seconds(20);
    return o;
  }

  static void OnRanks(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

  // Trains `steps` steps of the MLP on every rank and returns rank 0's
  // final parameters and loss history. on_device: through DeviceStaging;
  // otherwise the CPU path of tools/train_main.cc. `before_step(worker,
  // step)` runs before each step (the recovery test restarts a server).
  struct Result {
    std::vector<float> params;
    std::vector<float> losses;
    int recoveries = 0;
    std::vector<DeviceStaging::StepTiming> timings;
    std::optional<Layout> layout;
    std::string saved;        // Serialize() at save_at
    bool host_moved = false;  // the first step changed the worker's params()
  };
  Result Train(const std::string& job, const model::Mlp& m, int steps, bool on_device,
               const std::function<void(Worker&, int64_t)>& before_step = nullptr,
               WorkerOptions* extra = nullptr, int save_at = -1, int restore_at = -1) {
    model::Dataset data = model::MakeClusters(512, m.num_inputs(), m.num_classes(), 1);
    std::vector<float> init(m.num_params());
    m.Init(init.data(), 5);
    std::vector<Result> out(kWorld);
    OnRanks([&](int r) {
      WorkerOptions o = extra != nullptr ? *extra : Options(job, r);
      o.job = job;
      o.rank = r;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout(Tensors(m), init).ok());
      std::unique_ptr<gpu::Device> device;
      std::unique_ptr<model::DeviceMlp> mlp;
      std::unique_ptr<DeviceStaging> staging;
      if (on_device) {
        auto d = gpu::OpenDevice(GetParam().device);
        ASSERT_TRUE(d.ok()) << d.status();
        device = std::move(*d);
        auto dm = model::DeviceMlp::Create(m, device.get(), kBatch);
        ASSERT_TRUE(dm.ok()) << dm.status();
        mlp = std::move(*dm);
        auto s = DeviceStaging::Create(&worker, device.get(), Layers(m));
        ASSERT_TRUE(s.ok()) << s.status();
        staging = std::move(*s);
      }
      const auto half = worker.half_type();
      std::vector<float> work_params(m.num_params()), work_grads(m.num_params());
      bool restored = false;
      for (int64_t k = worker.step(); k < steps; ++k) {
        if (before_step) before_step(worker, k);
        if (k == save_at && out[r].saved.empty()) {
          auto blob = worker.Serialize();
          ASSERT_TRUE(blob.ok()) << blob.status();
          out[r].saved = std::move(*blob);
        }
        if (k == restore_at && !restored) {  // back to save_at
          restored = true;
          ASSERT_TRUE(worker.Deserialize(out[r].saved).ok());
          if (on_device) {
            ASSERT_TRUE(staging->Reload().ok());
          }
          out[r].losses.resize(static_cast<size_t>(worker.step()));
          k = worker.step() - 1;
          continue;
        }
        model::Dataset b = model::Batch(data, k, r, kWorld, kBatch);
        absl::Status st;
        float loss = 0;
        if (on_device) {
          ASSERT_TRUE(mlp->SetBatch(b.x.data(), b.y.data()).ok());
          for (int l = 0; l < m.num_layers(); ++l) {
            staging->WaitParams(gpu::Stream::kCompute, l);
            mlp->Forward(l, staging->params() + m.LayerRange(l).first);
          }
          for (int l = m.num_layers(); l-- > 0;) {
            const size_t off = m.LayerRange(l).first;
            mlp->Backward(l, staging->params() + off, staging->grads() + off);
            staging->GradientsEnqueued(Layers(m)[l]);
          }
          st = staging->Step();
          auto l = mlp->Loss();
          ASSERT_TRUE(l.ok()) << l.status();
          loss = *l;
          if (st.ok()) {
            auto t = staging->LastStepTiming();
            ASSERT_TRUE(t.ok()) << t.status();
            out[r].timings.push_back(*t);
          }
        } else {
          if (half) {
            HalfToFloat(*half, worker.half_params().data(), work_params.data(), m.num_params());
          }
          float* params = half ? work_params.data() : worker.params().data();
          float* grads = half ? work_grads.data() : worker.grads().data();
          loss = m.LossAndGrad(params, b.x.data(), b.y.data(), kBatch, grads);
          if (half) FloatToHalf(*half, grads, worker.half_grads().data(), m.num_params());
          st = worker.Step();
        }
        if (Worker::IsRecoverable(st)) {
          st = worker.Recover();
          ASSERT_TRUE(st.ok()) << st;
          if (on_device) {
            ASSERT_TRUE(staging->Reload().ok());
          }
          out[r].losses.resize(static_cast<size_t>(worker.step()));
          k = worker.step() - 1;
          continue;
        }
        ASSERT_TRUE(st.ok()) << st;
        out[r].losses.push_back(loss);
        if (k == 0 && !half) {
          out[r].host_moved = !std::equal(init.begin(), init.end(), worker.params().begin());
        }
      }
      out[r].recoveries = worker.recoveries();
      out[r].layout = worker.layout();
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r].params = std::move(*all);
    });
    return out[0];
  }

  Result TrainThroughRestart(const std::string& job, const model::Mlp& m, bool on_device,
                             double topk_ratio = 0);

  void StartCheckpointedCluster() {
    // The process id keeps runs outside Bazel (TempDir() = /tmp/) from
    // resuming an earlier run's checkpoints.
    StartCluster(absl::StrCat(::testing::TempDir(), "/ckpt-",
                              Name(::testing::TestParamInfo<Case>(GetParam(), 0)), "-", getpid()));
  }

  void ExpectSame(const Result& device, const Result& cpu) {
    ASSERT_EQ(device.params.size(), cpu.params.size());
    ASSERT_EQ(device.losses.size(), cpu.losses.size());
    if (GetParam().device == "host") {
      EXPECT_EQ(device.losses, cpu.losses);
      for (size_t i = 0; i < cpu.params.size(); ++i) {
        ASSERT_EQ(device.params[i], cpu.params[i]) << "parameter " << i;
      }
      return;
    }
    double worst = 0;
    for (size_t i = 0; i < cpu.params.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(device.params[i] - cpu.params[i])));
    }
    std::cout << "cuda vs cpu: worst parameter difference " << worst << "\n";
    EXPECT_LE(worst, 1e-3);  // docs/gpu.md: cuBLAS order, amplified by Adam over the steps
  }

  std::unique_ptr<InProcCluster> cluster_;
};

TEST_P(DeviceStagingTest, TrainsAsTheCpuPathDoes) {
  StartCluster("");
  model::Mlp m({32, 64, 48, 10});
  Result cpu = Train("cpu", m, 8, /*on_device=*/false);
  Result device = Train("dev", m, 8, /*on_device=*/true);
  ExpectSame(device, cpu);
  EXPECT_LT(cpu.losses.back(), cpu.losses.front());
}

// Trains job `job` for 6 steps while shard server 1 restarts before step 3:
// the job rolls back to the checkpoint of step 2 and recovers.
DeviceStagingTest::Result DeviceStagingTest::TrainThroughRestart(const std::string& job,
                                                                 const model::Mlp& m,
                                                                 bool on_device,
                                                                 double topk_ratio) {
  std::atomic<int> arrived{0};
  absl::Notification restarted;
  std::thread restarter([&] {
    while (arrived.load() < kWorld) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_TRUE(cluster_->RestartServer(1).ok());
    restarted.Notify();
  });
  auto restart_at_3 = [&](Worker& worker, int64_t k) {
    if (k != 3 || restarted.HasBeenNotified()) return;
    for (int i = 0; i < 500; ++i) {
      auto steps = worker.CompleteCheckpointSteps();
      if (steps.ok() && !steps->empty() && steps->back() == 2) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    arrived.fetch_add(1);
    restarted.WaitForNotification();
  };
  WorkerOptions o = Options(job, 0);
  o.recovery = true;
  o.recovery_timeout = absl::Seconds(30);
  o.checkpoint.every_steps = 2;
  o.checkpoint.initial = true;
  o.topk_ratio = topk_ratio;
  Result r = Train(job, m, 6, on_device, restart_at_3, &o);
  restarter.join();
  EXPECT_EQ(r.recoveries, 1);
  return r;
}

// The staging re-pins and re-uploads the restored parameters after a
// recovery; the result is the uninterrupted CPU run's.
TEST_P(DeviceStagingTest, RecoveryReloadsTheDevice) {
  if (GetParam().strategy == Strategy::kDdp) GTEST_SKIP() << "ddp keeps its state on workers";
  StartCheckpointedCluster();
  model::Mlp m({32, 64, 10});
  Result device = TrainThroughRestart("rec", m, /*on_device=*/true);
  Result cpu = Train("cpu", m, 6, /*on_device=*/false);
  ExpectSame(device, cpu);
}

WorkerOptions TopkOptions(WorkerOptions o) {
  o.topk_ratio = 0.05;
  return o;
}

// Top-k on the device: the same pairs and residuals as the worker's own
// compression on the CPU (bit for bit on the host device), and only the
// pairs cross to the host, bucket by bucket.
TEST_P(DeviceStagingTest, CompressesOnTheDevice) {
  if (GetParam().precision != Precision::kFp32) GTEST_SKIP() << "top-k is fp32 only";
  StartCluster("");
  model::Mlp m({32, 64, 48, 10});
  WorkerOptions o = TopkOptions(Options("topk-cpu", 0));
  Result cpu = Train("topk-cpu", m, 8, /*on_device=*/false, nullptr, &o);
  o.job = "topk-dev";
  Result device = Train("topk-dev", m, 8, /*on_device=*/true, nullptr, &o);
  ExpectSame(device, cpu);  // convergence under top-k: worker_test's TopkCompression

  // What crossed: every bucket's pairs once per step, nothing else.
  uint64_t pairs_bytes = 0;
  size_t buckets = 0;
  ASSERT_TRUE(device.layout.has_value());
  const Layout& layout = *device.layout;
  for (int s = 0; s < layout.num_shards(); ++s) {
    for (int b = 0; b < layout.num_buckets(s); ++b, ++buckets) {
      pairs_bytes += SparseBytes(TopkCount(o.topk_ratio, layout.bucket_range(s, b).size()));
    }
  }
  ASSERT_GT(buckets, 2u);
  ASSERT_FALSE(device.timings.empty());
  for (const auto& t : device.timings) {
    ASSERT_EQ(t.copies.size(), buckets);
    uint64_t bytes = 0;
    for (const auto& c : t.copies) bytes += c.bytes;
    EXPECT_EQ(bytes, pairs_bytes);
  }
  std::cout << "to the host per step: " << pairs_bytes << " bytes of pairs, against "
            << m.num_params() * sizeof(float) << " dense\n";
  EXPECT_LT(pairs_bytes * 5, m.num_params() * sizeof(float));
}

// DDP's optimizer runs on the device: a step leaves the worker's host
// parameters alone, and its parameters and state reach the worker (Store:
// Serialize) and come back (Load: Deserialize, here rolling back from step 4
// to step 2) with the CPU path's bits.
TEST_P(DeviceStagingTest, DdpUpdatesOnTheDevice) {
  if (GetParam().strategy != Strategy::kDdp) GTEST_SKIP() << "ddp only";
  StartCluster("");
  model::Mlp m({32, 64, 48, 10});
  Result cpu = Train("ddp-cpu", m, 6, /*on_device=*/false, nullptr, nullptr, 2, 4);
  Result device = Train("ddp-dev", m, 6, /*on_device=*/true, nullptr, nullptr, 2, 4);
  ExpectSame(device, cpu);
  ASSERT_EQ(device.losses.size(), 6u);
  if (GetParam().precision == Precision::kFp32) {
    EXPECT_TRUE(cpu.host_moved) << "the CPU path updates the worker's parameters";
    EXPECT_FALSE(device.host_moved) << "the device path leaves them to the device";
  }
  auto a = DecodeTrainState(device.saved);
  auto b = DecodeTrainState(cpu.saved);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->step, 2);
  EXPECT_EQ(a->step, b->step);
  ASSERT_EQ(a->state.size(), 2u) << "Adam's two slots";
  if (GetParam().device == "host") {
    EXPECT_EQ(a->params, b->params);
    EXPECT_EQ(a->state, b->state);
  }
}

// A recovery clears the device residual as the worker clears its own: the
// device run through a server restart equals the CPU run through the same.
TEST_P(DeviceStagingTest, CompressedRecoveryClearsTheResidual) {
  if (GetParam().strategy == Strategy::kDdp) GTEST_SKIP() << "ddp keeps its state on workers";
  if (GetParam().precision != Precision::kFp32) GTEST_SKIP() << "top-k is fp32 only";
  StartCheckpointedCluster();
  model::Mlp m({32, 64, 10});
  Result device = TrainThroughRestart("topk-rec-dev", m, /*on_device=*/true, 0.05);
  Result cpu = TrainThroughRestart("topk-rec-cpu", m, /*on_device=*/false, 0.05);
  ExpectSame(device, cpu);
}

// The copy of the last layer's gradients starts before backward has
// finished the first layer's: staging overlaps computation.
TEST_P(DeviceStagingTest, GradientCopiesOverlapBackward) {
  if (GetParam().strategy != Strategy::kZero2 || GetParam().precision != Precision::kFp32) {
    GTEST_SKIP() << "one configuration is enough";
  }
  StartCluster("");
  model::Mlp m({256, 1024, 1024, 10});
  Result device = Train("overlap", m, 4, /*on_device=*/true);
  int overlapped_steps = 0;
  for (const auto& t : device.timings) {
    std::cout << "backward done at " << t.compute_done_ms << " ms; copies:";
    for (const auto& c : t.copies) {
      std::cout << " [" << c.range.begin << "," << c.range.end << ") " << c.begin_ms << "-"
                << c.end_ms << " ms";
    }
    std::cout << "\n";
    ASSERT_EQ(t.copies.size(), 3u);
    // Every copy waits for its own gradient...
    for (const auto& c : t.copies) EXPECT_LE(c.begin_ms, c.end_ms);
    // ...and the first (the last layer's) starts before backward ends.
    if (t.copies.front().begin_ms < t.compute_done_ms) ++overlapped_steps;
  }
  EXPECT_GE(overlapped_steps, 3) << "of " << device.timings.size();
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceStagingTest,
                         ::testing::Values(Case{"host", Strategy::kDdp, Precision::kFp32},
                                           Case{"host", Strategy::kZero1, Precision::kFp32},
                                           Case{"host", Strategy::kZero2, Precision::kFp32},
                                           Case{"host", Strategy::kZero2, Precision::kBf16},
                                           Case{"host", Strategy::kDdp, Precision::kBf16},
                                           Case{"cuda", Strategy::kZero2, Precision::kFp32},
                                           Case{"cuda", Strategy::kDdp, Precision::kBf16}),
                         Name);

}  // namespace
}  // namespace tessel
