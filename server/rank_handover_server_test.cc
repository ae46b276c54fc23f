// A dead worker's rank handed to its replacement at the same epoch (issue
// 44), on a real shard server over UCX with a real registry: the worker
// holding rank 1's keys leaves the registry, a new process joins as rank 1
// and is handed rank 1's keys (a new generation of them) by GetFrameKey,
// without a new epoch. The earlier process's frames are dropped and counted
// unauthenticated from then on (it is fenced if it was only stalled), and
// the replacement's PUSH and PULL are taken from its own endpoint, which the
// earlier process had bound rank 1 to, and answered under its new keys.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "proto/registry.pb.h"
#include "rpc/registry_client.h"
#include "runtime/metrics.h"
#include "runtime/rank_keys.h"
#include "server/server_test_fixture.h"

namespace tessel {
namespace {

constexpr int kFloats = 1024;

// The server's count of frames refused for `reason` (shard 0), from the
// process's metrics.
double Refused(const std::string& reason) {
  const std::string text = metrics::Default().Expose();
  const std::string line =
      absl::StrCat("tessel_server_frames_refused_total{shard=\"0\",reason=\"", reason, "\"} ");
  const size_t at = text.find(line);
  if (at == std::string::npos) return 0;
  const size_t end = text.find('\n', at);
  double n = 0;
  EXPECT_TRUE(absl::SimpleAtod(text.substr(at + line.size(), end - at - line.size()), &n));
  return n;
}

class RankHandoverServerTest : public UcxShardServerTest {
 protected:
  RankHandoverServerTest() { options_.data_auth = true; }

  // A process joining the registry as worker `rank` of job "B".
  std::unique_ptr<RegistryClient> Join(int rank) {
    std::unique_ptr<RegistryClient> client = JoinWorker("B", rank);
    EXPECT_GT(client->joined_epoch(), 0);
    return client;
  }
  // GetFrameKey of rank `rank` of job "B" at epoch 1 by the process of
  // `claim` and registry membership `member_epoch`.
  grpc::Status Ask(int rank, const std::string& claim, int64_t member_epoch,
                   v1::FrameKeyResponse* resp) {
    return GetFrameKey("B", rank, /*epoch=*/1, claim, /*max_key_version=*/0, resp, member_epoch);
  }
  static std::shared_ptr<const RankFrameKeys> KeysOf(const v1::FrameKeyResponse& resp, int rank) {
    auto keys =
        RankFrameKeys::Create(FrameKeyGrant{resp.secret(), ""}, JobId("B"), 0, rank, /*epoch=*/1);
    EXPECT_TRUE(keys.ok()) << keys.status();
    return keys.ok() ? *keys : nullptr;
  }
  static SealedHeader Push(const RankFrameKeys& keys, int rank) {
    return keys.Seal(TestFrameHeader(FrameType::kPush, "B", 1, 0, rank, kFloats * 4), false);
  }
  static SealedHeader Pull(const RankFrameKeys& keys, int rank, int64_t step) {
    return keys.Seal(TestFrameHeader(FrameType::kPull, "B", 1, step, rank, 0), false);
  }
};

TEST_F(RankHandoverServerTest, TheReplacementIsHandedTheRankAndTheEarlierProcessIsFenced) {
  ASSERT_TRUE(CreateJob(OneBucketDdpJob("B", 2, kFloats)).ok());
  std::unique_ptr<RegistryClient> member0 = Join(0), earlier = Join(1);
  const std::string claim0 = NewJobSecret(), earlier_claim = NewJobSecret(),
                    replacement_claim = NewJobSecret();
  v1::FrameKeyResponse key0, earlier_key, replacement_key, refused;
  ASSERT_TRUE(Ask(0, claim0, member0->joined_epoch(), &key0).ok());
  ASSERT_TRUE(Ask(1, earlier_claim, earlier->joined_epoch(), &earlier_key).ok());
  std::shared_ptr<const RankFrameKeys> r0 = KeysOf(key0, 0), old1 = KeysOf(earlier_key, 1);
  ASSERT_TRUE(r0 != nullptr && old1 != nullptr);

  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), earlier_ep(address, kFloats),
      replacement_ep(address, kFloats);
  // The earlier process binds rank 1 to its endpoint: a pull of a step far
  // ahead, refused with an ERROR under its key.
  earlier_ep.Send(Pull(*old1, 1, 9), nullptr, 0);
  for (int i = 0; i < 250 && earlier_ep.frames().empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(earlier_ep.frames().size(), 1u);
  EXPECT_EQ(earlier_ep.frames()[0].header.type, FrameType::kError);

  // While the earlier process is rank 1's registered worker, another claim
  // naming its membership gets nothing.
  grpc::Status s = Ask(1, replacement_claim, earlier->joined_epoch(), &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("rank 1"), std::string::npos) << s.error_message();

  // It dies (its membership ends); the replacement joins as rank 1.
  const int64_t earlier_member = earlier->joined_epoch();
  ASSERT_TRUE(earlier->Leave().ok());
  std::unique_ptr<RegistryClient> replacement = Join(1);
  ASSERT_NE(replacement->joined_epoch(), earlier_member);
  s = Ask(1, replacement_claim, replacement->joined_epoch(), &replacement_key);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(replacement_key.secret().size(), kJobSecretBytes);
  EXPECT_NE(replacement_key.secret(), earlier_key.secret());
  EXPECT_EQ(Stats("B").frame_key_handovers(), 1);
  EXPECT_EQ(Stats("B").epoch(), 1) << "a handover makes no new epoch";
  // Asked again: the same answer. The earlier process asking: refused.
  v1::FrameKeyResponse again;
  ASSERT_TRUE(Ask(1, replacement_claim, replacement->joined_epoch(), &again).ok());
  EXPECT_EQ(again.secret(), replacement_key.secret());
  s = Ask(1, earlier_claim, earlier_member, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(Stats("B").frame_key_handovers(), 1);
  std::shared_ptr<const RankFrameKeys> new1 = KeysOf(replacement_key, 1);
  ASSERT_TRUE(new1 != nullptr);

  // The earlier process wakes up: its push and pull under the old key are
  // dropped and counted unauthenticated, from its own endpoint too.
  const std::vector<float> g0 = TwoRankGradient(0, kFloats), g1 = TwoRankGradient(1, kFloats);
  const std::vector<float> stale(kFloats, 1000.f);
  const double unauthenticated = Refused("unauthenticated");
  const int64_t rejected = Stats("B").rejected_frames();
  earlier_ep.Send(Push(*old1, 1), stale.data(), kFloats * 4);
  earlier_ep.Send(Pull(*old1, 1, 1), nullptr, 0);
  AwaitRejectedFrames("B", rejected + 2);
  EXPECT_EQ(Stats("B").rejected_frames(), rejected + 2);
  EXPECT_EQ(Refused("unauthenticated"), unauthenticated + 2);
  EXPECT_EQ(Stats("B").pushed_bytes(), 0) << "the fenced process's push was applied";

  // The replacement's push from its own endpoint is taken (rank 1 was bound
  // to the earlier endpoint), and the step completes with it.
  const double replayed = Refused("replayed");
  replacement_ep.Send(Push(*new1, 1), g1.data(), kFloats * 4);
  rank0.Send(Push(*r0, 0), g0.data(), kFloats * 4);
  rank0.Send(Pull(*r0, 0, 1), nullptr, 0);
  replacement_ep.Send(Pull(*new1, 1, 1), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1)) << "the step did not complete with the replacement's push";
  ASSERT_TRUE(replacement_ep.AwaitParams(1)) << "the replacement's pull was not answered";
  EXPECT_EQ(Refused("replayed"), replayed);
  EXPECT_TRUE(IsBitwiseMean(rank0.params(), g0, g1));
  EXPECT_TRUE(IsBitwiseMean(replacement_ep.params(), g0, g1));
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4);
  EXPECT_EQ(Stats("B").step(), 1);
  // The server seals toward rank 1 under the replacement's down key only.
  std::optional<FakeUcxWorker::Frame> params = replacement_ep.last_params_frame();
  ASSERT_TRUE(params.has_value());
  EXPECT_TRUE(new1->Verify(params->wire, params->header));
  EXPECT_FALSE(old1->Verify(params->wire, params->header));
  // And the fenced process got nothing after its ERROR of before.
  EXPECT_EQ(earlier_ep.frames().size(), 1u);
}

}  // namespace
}  // namespace tessel
