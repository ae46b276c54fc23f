// Worker-to-worker (mesh) authentication of hybrid jobs (issue 31): the
// processes of a hybrid job key their mesh from shard server 0 (GetMeshKey)
// when the servers authenticate data-path frames. While two tensor-parallel
// ranks sum vectors over the mesh, a forger with its own UCX endpoint, who
// read their mesh addresses from the registry and knows the group's name,
// sprays messages claiming to be the other rank, for the very tags the
// ranks are about to use, untagged and with made-up tags, carrying poison.
// Every one is dropped (and counted), no forged message takes a real one's
// place, and every sum is bitwise the one computed here.
#include <atomic>
#include <cstring>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "core/job_name.h"
#include "gtest/gtest.h"
#include "rpc/registry_client.h"
#include "runtime/frame_auth.h"
#include "runtime/metrics.h"
#include "testing/inproc_cluster.h"
#include "transport/transport_testing.h"
#include "worker/collectives.h"
#include "worker/hybrid.h"
#include "worker/peer_message.h"
#include "worker/worker_testing.h"

namespace tessel {
namespace {

constexpr int kRounds = 40;
constexpr size_t kFloats = 256;

std::vector<float> Vector(int rank, int round) {
  std::vector<float> v(kFloats);
  for (size_t i = 0; i < kFloats; ++i) {
    v[i] = 0.1f * static_cast<float>((i * 7 + static_cast<size_t>(round)) % 31) -
           0.37f * static_cast<float>(rank + 1);
  }
  return v;
}

// The peer-group id of a group name (FNV-1a, as worker/peer_group.cc and a
// forger reading it compute it).
uint64_t GroupIdOf(const std::string& name) {
  uint64_t id = 1469598103934665603ull;
  for (unsigned char c : name) id = (id ^ c) * 1099511628211ull;
  return id;
}

class MeshAuthTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.transport = InProcCluster::Kind::kUcx;
    options.data_auth_everywhere = GetParam();
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override { cluster_->Stop(); }

  std::unique_ptr<InProcCluster> cluster_;
};

// Sprays kRounds' worth of forged sums at both ranks of "hy.mesh" until
// `stop`; returns how many it sent.
int64_t Forge(const std::string& registry, const std::atomic<bool>& stop) {
  RegistryClient client(registry);
  auto view = client.GetView(MeshGroupName("hy"));
  if (!view.ok() || view->members_size() != 2) return 0;
  std::unique_ptr<UcxTransport> forger = MakeUcxTransport({});
  std::vector<PeerId> to(2);
  for (const auto& m : view->members()) {
    auto peer = forger->Connect(m.ucx_address());
    if (!peer.ok()) return 0;
    to[static_cast<size_t>(m.rank())] = *peer;
  }
  const std::vector<float> poison(kFloats, 1e6f);
  std::mt19937_64 random(7);
  int64_t sent = 0;
  std::atomic<int64_t> done{0};
  for (int pass = 0; pass < 20 && !stop.load(); ++pass) {
    for (int round = 0; round < kRounds; ++round) {
      for (int victim = 0; victim < 2; ++victim) {
        PeerMessageHeader h;
        h.group_id = GroupIdOf(MeshGroupName("hy"));
        h.from = 1 - victim;
        h.generation = {};
        h.tag = HybridTag(HybridMessage::kForwardSum, round, 0, 0);
        h.payload_bytes = kFloats * sizeof(float);
        std::vector<uint8_t> untagged = EncodePeerHeader(h);
        std::vector<uint8_t> made_up = untagged;
        for (size_t i = 0; i < kFrameTagBytes; ++i)
          made_up.push_back(static_cast<uint8_t>(random()));
        for (const auto& header : {untagged, made_up}) {
          forger->Send(to[static_cast<size_t>(victim)], header, poison.data(),
                       poison.size() * sizeof(float), [&done](absl::Status) { ++done; });
          ++sent;
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (int i = 0; i < 500 && done.load() < sent; ++i) absl::SleepFor(absl::Milliseconds(10));
  forger->Shutdown();
  return sent;
}

double MeshMetric(int rank) {
  return metrics::Default()
      .AddCounter("tessel_peer_messages_unauthenticated_total",
                  "worker-to-worker (hybrid mesh) messages dropped for a missing or wrong tag",
                  {"group", "rank"})
      .GetCounter({"hy.mesh", absl::StrCat(rank)})
      ->value();
}

TEST_P(MeshAuthTest, ForgedMeshMessagesAreDroppedAndEverySumIsExact) {
  const bool auth = GetParam();
  const double metric_before[2] = {MeshMetric(0), MeshMetric(1)};
  std::atomic<int> connected{0};
  std::atomic<bool> stop{false};
  std::atomic<int64_t> refused{0}, sent{0}, taken{0};
  std::thread forger;
  OnRanks(2, [&](int r) {
    HybridOptions o;
    o.worker = cluster_->worker_options("hy", r, 2);
    o.config = {.dp = 1, .tp = 2, .pp = 1, .micro_batches = 1};
    o.make_worker = false;
    auto session = HybridSession::Connect(o);
    ASSERT_TRUE(session.ok()) << session.status();
    PeerGroup& peers = (*session)->peers();
    EXPECT_EQ(peers.authenticated(), auth);
    if (++connected == 2) {
      forger = std::thread([&] { sent = Forge(cluster_->registry_address(), stop); });
    }
    while (connected.load() < 2) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(100));  // the forger's first pass lands first
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> mine = Vector(r, round);
      absl::Status s =
          AllReduceSum(peers, {0, 1}, HybridTag(HybridMessage::kForwardSum, round, 0, 0),
                       absl::MakeSpan(mine), "the test's sum");
      if (!auth) {
        // Unauthenticated, a forged message takes the real one's place (or
        // trips the duplicate-tag check): the attack this closes.
        if (!s.ok() || mine != [&] {
              std::vector<float> want = Vector(0, round), b = Vector(1, round);
              for (size_t i = 0; i < kFloats; ++i) want[i] += b[i];
              return want;
            }()) {
          ++taken;
          break;
        }
        continue;
      }
      ASSERT_TRUE(s.ok()) << s;
      std::vector<float> want = Vector(0, round), other = Vector(1, round);
      for (size_t i = 0; i < kFloats; ++i) want[i] += other[i];
      ASSERT_EQ(std::memcmp(mine.data(), want.data(), kFloats * sizeof(float)), 0)
          << "round " << round;
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (r == 0) {
      stop = true;
      forger.join();
    }
    refused += peers.refused_unauthenticated();
    // The drops are exported as a metric too (the counter outlives the
    // group: it holds every group "hy.mesh" of this process, hence the delta).
    EXPECT_EQ(MeshMetric(r) - metric_before[r],
              static_cast<double>(peers.refused_unauthenticated()));
    if (auth) {
      EXPECT_TRUE((*session)->Finish().ok());
    }
  });
  EXPECT_GT(sent.load(), 0);
  std::cout << "data auth " << (auth ? "on" : "off") << ": forged mesh messages sent " << sent
            << ", dropped " << refused << ", taken " << taken << "\n";
  if (auth) {
    EXPECT_GT(refused.load(), 0) << "no forged message reached the ranks: the test proved nothing";
  } else {
    EXPECT_EQ(refused.load(), 0);
    EXPECT_GT(taken.load(), 0) << "the forger's messages were not taken on an unauthenticated "
                                  "mesh: the test would not catch a hole";
  }
}

INSTANTIATE_TEST_SUITE_P(DataAuth, MeshAuthTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

}  // namespace
}  // namespace tessel
