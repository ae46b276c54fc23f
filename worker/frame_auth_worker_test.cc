// Data-path authentication on the workers' side (issue 31): while two
// workers train through shard servers that authenticate every frame, a
// forger with its own UCX endpoint, knowing the workers' addresses (from
// the registry) and their epoch, sprays PARAMS frames for the buckets they
// wait for, untagged and with made-up tags, carrying poison. Every one is
// dropped, and training ends bitwise where the same job without the forger
// ends. Issue 42 part 2: the same holds against a member of the job (rank
// 0's process, holding rank 0's keys) pushing as rank 1 and forging the
// servers' PARAMS toward rank 1.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/wire.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/registry_client.h"
#include "runtime/frame_auth.h"
#include "runtime/metrics.h"
#include "runtime/rank_keys.h"
#include "testing/inproc_cluster.h"
#include "worker/internal/job_context.h"
#include "worker/worker.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 6;
constexpr int kFloats = 512;  // two shards of one 1 KiB bucket each

// The cluster's servers speak plaintext gRPC (no credentials in this test).
std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

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

// A member of the job: rank 0's process, which holds rank 0's keys (it asks
// GetFrameKey with its process's claim, as its worker did, and gets the same
// secrets). It pushes poison as rank 1 to both servers and sends rank 1
// PARAMS under rank 0's keys. With one key per job both were taken; now the
// servers drop the pushes (counted) and rank 1 drops the PARAMS, and
// training ends bitwise where the quiet job ends.
TEST_F(FrameAuthWorkerTest, AMemberCannotActAsAnotherRankOrAsAServer) {
  const auto [want, none] = Train("quiet", nullptr);
  EXPECT_EQ(none, 0);
  int64_t params_sent = 0, pushes_sent = 0;
  std::vector<std::string> server_grpc(2);
  const auto [got, dropped] = Train("member", [&](Victim victim) {
    RegistryClient registry(cluster_->registry_address());
    auto workers = registry.GetView("member");
    auto pool = registry.GetView("default");
    ASSERT_TRUE(workers.ok() && pool.ok());
    auto forger = cluster_->transport_factory()();
    ASSERT_TRUE(forger.ok()) << forger.status();
    (*forger)->SetHandler([](const Incoming&) { return Accept{}; });
    std::vector<PeerId> servers(2);
    std::vector<std::shared_ptr<const RankFrameKeys>> keys(2);
    const std::string claim = internal::JobContext(WorkerOptions()).frame_key_claim;
    for (const v1::Member& m : pool->members()) {
      if (m.role() != v1::ROLE_SERVER) continue;
      const size_t shard = static_cast<size_t>(m.rank());
      ASSERT_LT(shard, servers.size());
      servers[shard] = *(*forger)->Connect(m.ucx_address());
      server_grpc[shard] = m.grpc_address();
      auto stub = v1::ShardServer::NewStub(Channel(m.grpc_address()));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      v1::FrameKeyRequest req;
      req.set_job("member");
      req.set_rank(0);
      req.set_epoch(victim.epoch);
      req.set_claim(claim);
      v1::FrameKeyResponse resp;
      grpc::Status s = stub->GetFrameKey(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      auto k = RankFrameKeys::Create(FrameKeyGrant{resp.secret(), resp.host_secret()},
                                     JobId("member"), static_cast<int32_t>(shard), 0, victim.epoch);
      ASSERT_TRUE(k.ok()) << k.status();
      keys[shard] = *k;
    }
    PeerId rank1 = 0;
    for (const v1::Member& m : workers->members()) {
      if (m.role() == v1::ROLE_WORKER && m.rank() == 1)
        rank1 = *(*forger)->Connect(m.ucx_address());
    }
    std::vector<float> poison(kFloats / 2, 1e30f);
    for (int round = 0; round < 40; ++round) {
      for (int shard = 0; shard < 2; ++shard) {
        const int64_t step = victim.step->load();
        FrameHeader push =
            MakeHeader(FrameType::kPush, JobId("member"), victim.epoch, step, 1, shard, 0);
        push.payload_bytes = poison.size() * sizeof(float);
        const SealedHeader as_rank1 = keys[shard]->Seal(push, /*to_worker=*/false);
        (*forger)->Send(servers[shard], absl::MakeConstSpan(as_rank1), poison.data(),
                        push.payload_bytes, nullptr);
        ++pushes_sent;
        FrameHeader params =
            MakeHeader(FrameType::kParams, JobId("member"), victim.epoch, step + 1, 1, shard, 0);
        params.bucket_count = 1;
        params.payload_bytes = poison.size() * sizeof(float);
        for (bool to_worker : {false, true}) {
          const SealedHeader forged = keys[shard]->Seal(params, to_worker);
          (*forger)->Send(rank1, absl::MakeConstSpan(forged), poison.data(), params.payload_bytes,
                          nullptr);
          ++params_sent;
        }
      }
      absl::SleepFor(absl::Milliseconds(3));
    }
    absl::SleepFor(absl::Milliseconds(200));  // let the last ones land
    (*forger)->Shutdown();
  });
  EXPECT_GT(params_sent, 0);
  EXPECT_EQ(dropped, params_sent) << "every forged PARAMS frame reached rank 1 and was dropped";
  int64_t refused = 0;
  for (const std::string& address : server_grpc) {
    auto stub = v1::ShardServer::NewStub(Channel(address));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::JobRef ref;
    ref.set_job("member");
    v1::ShardStats stats;
    ASSERT_TRUE(stub->GetStats(&ctx, ref, &stats).ok());
    refused += stats.rejected_frames();
  }
  EXPECT_EQ(refused, pushes_sent) << "every push as rank 1 was dropped and counted";
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0) << "parameter " << i;
  }
}

}  // namespace
}  // namespace tessel
