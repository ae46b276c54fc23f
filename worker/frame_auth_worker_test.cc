// Data-path authentication on the workers' side (issue 31): while two
// workers train through shard servers that authenticate every frame, a
// forger with its own UCX endpoint, knowing the workers' addresses (from
// the registry) and their epoch, sprays PARAMS frames for the buckets they
// wait for, untagged and with made-up tags, carrying poison. Every one is
// dropped, and training ends bitwise where the same job without the forger
// ends.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "core/wire.h"
#include "gtest/gtest.h"
#include "rpc/registry_client.h"
#include "runtime/frame_auth.h"
#include "runtime/metrics.h"
#include "testing/inproc_cluster.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 6;
constexpr int kFloats = 512;  // two shards of one 1 KiB bucket each

std::vector<float> Init() {
  std::vector<float> v(kFloats);
  for (int i = 0; i < kFloats; ++i) v[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
  return v;
}

class FrameAuthWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.transport = InProcCluster::Kind::kUcx;
    options.data_auth_everywhere = true;
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override { cluster_->Stop(); }

  // What a forger running beside the workers may know: their epoch, and
  // the step they are at (published by the workers' threads).
  struct Victim {
    int64_t epoch = 0;
    const std::atomic<int64_t>* step = nullptr;
  };

  // Trains `job` (zero2, SGD) for kSteps; `during` runs once both ranks
  // registered, while they train. Returns rank 0's parameters and the
  // frames the workers dropped as unauthenticated.
  std::pair<std::vector<float>, int64_t> Train(const std::string& job,
                                               const std::function<void(Victim)>& during) {
    std::vector<std::vector<float>> out(kWorld);
    std::atomic<int64_t> dropped{0};
    std::atomic<int> registered{0};
    std::atomic<bool> side_done{false};  // counters are read after the forger ends
    std::atomic<int64_t> step{0};
    std::thread side;
    OnRanks(kWorld, [&](int r) {
      WorkerOptions o = cluster_->worker_options(job, r, kWorld);
      o.strategy = Strategy::kZero2;
      o.bucket_bytes = 1024;
      auto w = Worker::Connect(o);
      ASSERT_TRUE(w.ok()) << w.status();
      Worker& worker = **w;
      ASSERT_TRUE(worker.RegisterLayout({{"w", {kFloats}}}, Init()).ok());
      EXPECT_TRUE(worker.data_path_authenticated());
      // The last to register starts `during` and joins it before its
      // worker goes.
      const bool runs_side = ++registered == kWorld && during;
      if (runs_side) {
        side = std::thread([&, victim = Victim{worker.epoch(), &step}] { during(victim); });
      }
      while (registered.load() < kWorld) absl::SleepFor(absl::Milliseconds(1));
      for (int64_t s = 0; s < kSteps; ++s) {
        absl::Span<float> p = worker.params();
        absl::Span<float> g = worker.grads();
        for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5f * p[i] + 0.001f * (r + 1) * (s + 1);
        ASSERT_TRUE(worker.Step().ok());
        if (r == 0) step = worker.step();
        absl::SleepFor(absl::Milliseconds(20));  // room for the forger's frames
      }
      if (runs_side) {
        side.join();
        side_done = true;
      }
      while (during && !side_done.load()) absl::SleepFor(absl::Milliseconds(1));
      dropped += worker.unauthenticated_frames_dropped();
      auto all = worker.GatherAll();
      ASSERT_TRUE(all.ok()) << all.status();
      out[r] = *all;
    });
    EXPECT_EQ(out[0], out[1]);
    return {out[0], dropped.load()};
  }

  std::unique_ptr<InProcCluster> cluster_;
};

TEST_F(FrameAuthWorkerTest, ForgedParametersAreDroppedAndTrainingStaysBitwise) {
  const auto [want, none] = Train("quiet", nullptr);
  EXPECT_EQ(none, 0);
  int64_t sent = 0;
  const auto [got, dropped] = Train("attacked", [&](Victim victim) {
    RegistryClient registry(cluster_->registry_address());
    auto view = registry.GetView("attacked");
    ASSERT_TRUE(view.ok()) << view.status();
    auto forger = cluster_->transport_factory()();
    ASSERT_TRUE(forger.ok()) << forger.status();
    (*forger)->SetHandler([](const Incoming&) { return Accept{}; });
    std::vector<PeerId> targets;
    for (const v1::Member& m : view->members()) {
      if (m.role() != v1::ROLE_WORKER) continue;
      auto peer = (*forger)->Connect(m.ucx_address());
      ASSERT_TRUE(peer.ok()) << peer.status();
      targets.push_back(*peer);
    }
    ASSERT_EQ(targets.size(), size_t{kWorld});
    std::vector<float> poison(kFloats / 2, 1e30f);
    for (int round = 0; round < 40; ++round) {
      for (int shard = 0; shard < 2; ++shard) {
        FrameHeader h;
        h.type = FrameType::kParams;
        h.job_id = JobId("attacked");
        h.epoch = victim.epoch;
        h.step = victim.step->load() + 1;  // what the workers wait for next
        h.shard = shard;
        h.bucket = 0;
        h.bucket_count = 1;
        h.payload_bytes = poison.size() * sizeof(float);
        const HeaderBytes bare = EncodeHeader(h);
        SealedHeader made_up{};
        std::memcpy(made_up.data(), bare.data(), kHeaderBytes);
        made_up[kHeaderBytes + round % kFrameTagBytes] = static_cast<uint8_t>(round);
        for (PeerId t : targets) {
          (*forger)->Send(t, absl::MakeConstSpan(bare), poison.data(), h.payload_bytes, nullptr);
          (*forger)->Send(t, absl::MakeConstSpan(made_up), poison.data(), h.payload_bytes, nullptr);
          sent += 2;
        }
      }
      absl::SleepFor(absl::Milliseconds(3));
    }
    absl::SleepFor(absl::Milliseconds(200));  // let the last ones land
    (*forger)->Shutdown();
  });
  EXPECT_GT(sent, 0);
  EXPECT_EQ(dropped, sent) << "every forged frame reached a worker and was dropped";
  // And the workers' metrics count them (as of each rank's last step).
  const std::string metrics = metrics::Default().Expose();
  EXPECT_NE(metrics.find("tessel_worker_unauthenticated_frames_total{job=\"attacked\""),
            std::string::npos)
      << metrics;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "parameter " << i;
  }
}

}  // namespace
}  // namespace tessel
