// Data-path authentication on a real shard server over UCX (issue 31): with
// --data_auth on, a frame of job B counts only if it carries a tag made
// with B's key for its epoch, which the server hands out over GetFrameKey.
// Forgers are separate processes (ucx_frame_sender) that know the server's
// UCX address and the job's epoch (both are readable from the registry):
// one with no key (untagged frames, made-up tags), one holding job A's key
// writing into job B, and replays of a real frame of an old epoch (as it
// was, and re-stamped with the new epoch). None is applied; the real
// workers' frames all are (forged PUSHes for rank 1 do not block rank 1's
// real one), the served parameters are the real mean bitwise, and the
// server's replies carry valid tags.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "rpc/grpc_util.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "server/server_test_fixture.h"
#include "testing/process.h"

namespace tessel {
namespace {

constexpr int kFloats = 1024;
constexpr int kCopies = 5;  // frames each forger process sends

v1::CreateJobRequest DdpJob(const std::string& name, int world) {
  return OneBucketDdpJob(name, world, kFloats);
}

// Runs ucx_frame_sender: `count` frames of `header` and a payload of
// `bytes` to `address`, from a process of its own; OK if it sent them all.
absl::Status Forge(const std::string& address, absl::Span<const uint8_t> header, size_t bytes,
                   int count = kCopies) {
  ProcessGroup group(MakeRunDir("forger"));
  TESSEL_RETURN_IF_ERROR(group.Start(
      "forger",
      {FindBinary("transport/ucx_frame_sender"), absl::BytesToHexString(address), kTestUcxTls,
       absl::BytesToHexString(
           absl::string_view(reinterpret_cast<const char*>(header.data()), header.size())),
       absl::StrCat(bytes), absl::StrCat(count)}));
  return group.WaitAll({"forger"}, absl::Seconds(30));
}

class FrameAuthServerTest : public UcxShardServerTest {
 protected:
  FrameAuthServerTest() { options_.data_auth = true; }

  // GetFrameKey for (job, rank, epoch) under `claim`: the answer's code.
  grpc::StatusCode Ask(const std::string& job, int rank, int64_t epoch, const std::string& claim,
                       v1::FrameKeyResponse* resp, std::string* message = nullptr) {
    grpc::Status s = GetFrameKey(job, rank, epoch, claim, 0, resp);
    if (message != nullptr) *message = s.error_message();
    return s.error_code();
  }
};

TEST_F(FrameAuthServerTest, OnlyTheJobsWorkersFramesAreApplied) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  ASSERT_TRUE(CreateJob(DdpJob("A", 1)).ok());
  std::string a_secret, b_secret;
  std::shared_ptr<const RankFrameKeys> b = KeyOf("B", 0, 1, &b_secret), b1 = KeyOf("B", 1),
                                       a = KeyOf("A", 0, 1, &a_secret);
  ASSERT_TRUE(a != nullptr && b != nullptr && b1 != nullptr);
  EXPECT_NE(a_secret, b_secret);

  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), rank1(address, kFloats);
  const std::vector<float> g0 = TwoRankGradient(0, kFloats), g1 = TwoRankGradient(1, kFloats);
  const FrameHeader push1 = TestFrameHeader(FrameType::kPush, "B", 1, 0, 1, kFloats * 4);

  // Forgeries first, all for rank 1's push of step 0.
  const HeaderBytes bare = EncodeHeader(push1);
  EXPECT_TRUE(Forge(address, bare, kFloats * 4).ok());  // untagged
  SealedHeader made_up{};
  std::memcpy(made_up.data(), bare.data(), kHeaderBytes);
  for (size_t i = kHeaderBytes; i < made_up.size(); ++i) made_up[i] = static_cast<uint8_t>(i * 7);
  EXPECT_TRUE(Forge(address, made_up, kFloats * 4).ok());  // a made-up tag
  // Job A's worker holds a real key, of the wrong job.
  std::shared_ptr<const RankFrameKeys> a_for_b =
      *RankFrameKeys::Create(FrameKeyGrant{a_secret, ""}, JobId("B"), 0, 1, 1);
  const SealedHeader wrong_job = a_for_b->Seal(push1, false);
  EXPECT_TRUE(Forge(address, wrong_job, kFloats * 4).ok());
  const int forged = 3 * kCopies;
  AwaitRejectedFrames("B", forged);
  EXPECT_EQ(Stats("B").rejected_frames(), forged);
  EXPECT_EQ(Stats("B").pushed_bytes(), 0) << "a forged push was applied";

  // The real workers: both pushes count, the mean is theirs.
  const SealedHeader real0 =
      b->Seal(TestFrameHeader(FrameType::kPush, "B", 1, 0, 0, kFloats * 4), false);
  const SealedHeader real1 = b1->Seal(push1, false);
  rank0.Send(absl::MakeConstSpan(real0), g0.data(), kFloats * 4);
  rank1.Send(absl::MakeConstSpan(real1), g1.data(), kFloats * 4);
  const SealedHeader pull = b->Seal(TestFrameHeader(FrameType::kPull, "B", 1, 1, 0, 0), false);
  rank0.Send(absl::MakeConstSpan(pull), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1)) << "the real workers' step did not complete";
  const std::vector<float> mean = rank0.params();
  ASSERT_TRUE(IsBitwiseMean(mean, g0, g1));
  for (const auto& [h, wire] : rank0.frames()) {
    EXPECT_NE(h.type, FrameType::kError) << DescribeHeader(h);
    EXPECT_TRUE(b->Verify(wire, h)) << "the server's reply is not sealed with rank 0's key";
  }
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4);
  EXPECT_EQ(Stats("B").step(), 1);

  // A new epoch (a recovery): the captured frames of epoch 1, replayed as
  // they were (refused: old epoch) and re-stamped with epoch 2 (no valid tag).
  ASSERT_TRUE(SetEpoch("B", 2).ok());
  const int64_t rejected = Stats("B").rejected_frames();
  FrameHeader step1 = TestFrameHeader(FrameType::kPush, "B", 1, 1, 1, kFloats * 4);
  const SealedHeader old_epoch = b1->Seal(step1, false);  // as captured in epoch 1
  EXPECT_TRUE(Forge(address, old_epoch, kFloats * 4).ok());
  SealedHeader restamped = old_epoch;
  step1.epoch = 2;
  const HeaderBytes at2 = EncodeHeader(step1);
  std::memcpy(restamped.data(), at2.data(), kHeaderBytes);
  EXPECT_TRUE(Forge(address, restamped, kFloats * 4).ok());
  AwaitRejectedFrames("B", rejected + 2 * kCopies);
  EXPECT_EQ(Stats("B").rejected_frames(), rejected + 2 * kCopies);
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4) << "a replayed push was applied";
  EXPECT_EQ(Stats("B").step(), 1);
}

// Issue 42: with data-path authentication on, a frame that cannot be
// authenticated gets no answer at all: one naming a job this server does not
// serve (an ERROR "no such job" would tell a prober which job ids exist) and
// a malformed one. A frame of a served job under its key still gets its
// ERROR, after them on the same endpoint, so their answers would have come.
TEST_F(FrameAuthServerTest, FramesThatCannotBeAuthenticatedGetNoAnswer) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  std::string b_secret;
  std::shared_ptr<const RankFrameKeys> b = KeyOf("B", 0, 1, &b_secret);
  ASSERT_TRUE(b != nullptr);
  FakeUcxWorker prober(server_->transport_address(), kFloats);
  std::vector<float> g(kFloats);
  const HeaderBytes unknown =
      EncodeHeader(TestFrameHeader(FrameType::kPush, "nope", 1, 0, 0, kFloats * 4));
  prober.Send(unknown, g.data(), kFloats * 4);
  const SealedHeader unknown_sealed =
      (*RankFrameKeys::Create(FrameKeyGrant{b_secret, ""}, JobId("nope"), 0, 0, 1))
          ->Seal(TestFrameHeader(FrameType::kPull, "nope", 1, 1, 0, 0), false);
  prober.Send(unknown_sealed, nullptr, 0);
  std::vector<uint8_t> malformed(kHeaderBytes, 0xab);
  prober.Send(malformed, nullptr, 0);
  // A pull of a step far ahead: refused with an ERROR under B's key.
  const SealedHeader ahead = b->Seal(TestFrameHeader(FrameType::kPull, "B", 1, 9, 0, 0), false);
  prober.Send(ahead, nullptr, 0);
  std::vector<FakeUcxWorker::Frame> frames;
  for (int i = 0; i < 500 && frames.empty(); ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    frames = prober.frames();
  }
  absl::SleepFor(absl::Milliseconds(200));
  frames = prober.frames();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].header.type, FrameType::kError);
  EXPECT_EQ(frames[0].header.job_id, JobId("B")) << DescribeHeader(frames[0].header);
  EXPECT_TRUE(b->Verify(frames[0].wire, frames[0].header));
}

TEST_F(FrameAuthServerTest, KeysGoOnlyToTheJobsWorkersAndOnlyForJobsThatExist) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  v1::FrameKeyResponse resp;
  EXPECT_EQ(Ask("nope", 0, 1, NewJobSecret(), &resp), grpc::StatusCode::NOT_FOUND);
}

// Issue 42 part 2: a rank's key of an epoch goes to one worker process, the
// first to claim it; the same claim again (a retried RPC) gets the same
// secret, any other claim is refused naming the rank. Ranks differ, epochs
// differ, and only the job's current epoch and ranks are served.
TEST_F(FrameAuthServerTest, ARanksKeyGoesToOneProcessPerEpoch) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  const std::string mine = NewJobSecret(), theirs = NewJobSecret();
  v1::FrameKeyResponse first, again, other, rank1;
  ASSERT_EQ(Ask("B", 0, 1, mine, &first), grpc::StatusCode::OK);
  EXPECT_EQ(first.secret().size(), kJobSecretBytes);
  EXPECT_TRUE(first.host_secret().empty()) << "a flat job has no host groups";
  ASSERT_EQ(Ask("B", 0, 1, mine, &again), grpc::StatusCode::OK);
  EXPECT_EQ(again.secret(), first.secret());
  std::string message;
  EXPECT_EQ(Ask("B", 0, 1, theirs, &other, &message), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
  EXPECT_TRUE(other.secret().empty());
  ASSERT_EQ(Ask("B", 1, 1, theirs, &rank1), grpc::StatusCode::OK);
  EXPECT_NE(rank1.secret(), first.secret());
  EXPECT_EQ(Ask("B", 2, 1, NewJobSecret(), &other), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Ask("B", -1, 1, NewJobSecret(), &other), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Ask("B", 1, 2, NewJobSecret(), &other), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Ask("B", 1, 1, "", &other), grpc::StatusCode::INVALID_ARGUMENT);  // no claim
  // A recovery's new epoch: a new key, claimed afresh.
  ASSERT_TRUE(SetEpoch("B", 2).ok());
  v1::FrameKeyResponse next;
  ASSERT_EQ(Ask("B", 0, 2, theirs, &next), grpc::StatusCode::OK);
  EXPECT_NE(next.secret(), first.secret());
  EXPECT_EQ(Ask("B", 0, 1, mine, &other), grpc::StatusCode::FAILED_PRECONDITION);
}

// Host aggregation: the ranks of a host group get the group's secret, the
// others do not (a group of one has none).
TEST_F(FrameAuthServerTest, OnlyAHostGroupsRanksGetItsSecret) {
  v1::CreateJobRequest req = DdpJob("H", 3);
  for (int g : {0, 0, 1}) req.mutable_spec()->add_rank_groups(g);
  ASSERT_TRUE(CreateJob(req).ok());
  v1::FrameKeyResponse r0, r1, r2;
  ASSERT_EQ(Ask("H", 0, 1, NewJobSecret(), &r0), grpc::StatusCode::OK);
  ASSERT_EQ(Ask("H", 1, 1, NewJobSecret(), &r1), grpc::StatusCode::OK);
  ASSERT_EQ(Ask("H", 2, 1, NewJobSecret(), &r2), grpc::StatusCode::OK);
  EXPECT_EQ(r0.host_secret().size(), kJobSecretBytes);
  EXPECT_EQ(r0.host_secret(), r1.host_secret());
  EXPECT_TRUE(r2.host_secret().empty());
  EXPECT_NE(r0.host_secret(), r0.secret());
}

// Issue 42 part 2: a worker of the job holds its own rank's key only. Its
// PUSH as another rank (under its own key) is dropped and counted, and that
// rank's real push is still taken.
TEST_F(FrameAuthServerTest, AWorkerCannotPushAsAnotherRank) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  std::shared_ptr<const RankFrameKeys> r0 = KeyOf("B", 0), r1 = KeyOf("B", 1);
  ASSERT_TRUE(r0 != nullptr && r1 != nullptr);
  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), rank1(address, kFloats);
  std::vector<float> g0(kFloats, 1.f), g1(kFloats, 3.f), evil(kFloats, 1000.f);
  const FrameHeader push1 = TestFrameHeader(FrameType::kPush, "B", 1, 0, 1, kFloats * 4);
  const SealedHeader as_rank1 = r0->Seal(push1, false);  // rank 0's key, rank 1's header
  rank0.Send(absl::MakeConstSpan(as_rank1), evil.data(), kFloats * 4);
  AwaitRejectedFrames("B", 1);
  EXPECT_EQ(Stats("B").rejected_frames(), 1);
  EXPECT_EQ(Stats("B").pushed_bytes(), 0) << "a push as another rank was applied";
  rank0.Send(absl::MakeConstSpan(
                 r0->Seal(TestFrameHeader(FrameType::kPush, "B", 1, 0, 0, kFloats * 4), false)),
             g0.data(), kFloats * 4);
  rank1.Send(absl::MakeConstSpan(r1->Seal(push1, false)), g1.data(), kFloats * 4);
  rank0.Send(
      absl::MakeConstSpan(r0->Seal(TestFrameHeader(FrameType::kPull, "B", 1, 1, 0, 0), false)),
      nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1));
  EXPECT_EQ(rank0.params()[0], 2.f);  // (1 + 3) / 2: the forged 1000 is not in it
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4);
}

// Issue 42 part 2: a PULL captured on the fabric and re-sent from another
// endpoint gets nothing: the rank's frames of the epoch came from its own
// endpoint. The real worker's pull is answered.
TEST_F(FrameAuthServerTest, AReplayedPullFromAnotherEndpointGetsNoParameters) {
  ASSERT_TRUE(CreateJob(DdpJob("B", 2)).ok());
  std::shared_ptr<const RankFrameKeys> r0 = KeyOf("B", 0), r1 = KeyOf("B", 1);
  ASSERT_TRUE(r0 != nullptr && r1 != nullptr);
  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), rank1(address, kFloats), replayer(address, kFloats);
  std::vector<float> g0(kFloats, 1.f), g1(kFloats, 3.f);
  rank0.Send(absl::MakeConstSpan(
                 r0->Seal(TestFrameHeader(FrameType::kPush, "B", 1, 0, 0, kFloats * 4), false)),
             g0.data(), kFloats * 4);
  rank1.Send(absl::MakeConstSpan(
                 r1->Seal(TestFrameHeader(FrameType::kPush, "B", 1, 0, 1, kFloats * 4), false)),
             g1.data(), kFloats * 4);
  const SealedHeader pull = r0->Seal(TestFrameHeader(FrameType::kPull, "B", 1, 1, 0, 0), false);
  rank0.Send(absl::MakeConstSpan(pull), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1));
  const int64_t rejected = Stats("B").rejected_frames();
  replayer.Send(absl::MakeConstSpan(pull), nullptr, 0);  // the captured bytes
  AwaitRejectedFrames("B", rejected + 1);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Stats("B").rejected_frames(), rejected + 1);
  EXPECT_TRUE(replayer.frames().empty())
      << "the replayer got " << DescribeHeader(replayer.frames()[0].header);
}

// A hybrid job's mesh ("J.mesh") is no job on the server: its secret is made
// on the first ask and is the same for every member that asks after, differs
// per mesh, and is the one members hand back (`keep`) once they hold one (a
// restarted server takes the running mesh's). Anything else is refused.
TEST_F(FrameAuthServerTest, AMeshGetsOneSecretForAllItsMembers) {
  auto mesh_key = [&](const std::string& mesh, const std::string& keep, std::string* secret) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::MeshKeyRequest req;
    req.set_mesh(mesh);
    req.set_keep(keep);
    v1::FrameKeyResponse resp;
    grpc::Status s = stub_->GetMeshKey(&ctx, req, &resp);
    *secret = resp.secret();
    return s.error_code();
  };
  std::string first, again, other;
  ASSERT_EQ(mesh_key("mlp.mesh", "", &first), grpc::StatusCode::OK);
  EXPECT_EQ(first.size(), kJobSecretBytes);
  ASSERT_EQ(mesh_key("mlp.mesh", "", &again), grpc::StatusCode::OK);
  EXPECT_EQ(again, first);
  ASSERT_EQ(mesh_key("bert.mesh", "", &other), grpc::StatusCode::OK);
  EXPECT_NE(other, first);
  const std::string held = NewJobSecret();
  ASSERT_EQ(mesh_key("mlp.mesh", held, &again), grpc::StatusCode::OK);
  EXPECT_EQ(again, held);
  ASSERT_EQ(mesh_key("mlp.mesh", "", &again), grpc::StatusCode::OK);
  EXPECT_EQ(again, held);
  EXPECT_EQ(mesh_key("mlp", "", &again), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(mesh_key("mlp.mesh", "short", &again), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_EQ(mesh_key("mlp.mesh", "", &again), grpc::StatusCode::OK);
  EXPECT_EQ(again, held) << "a refused request changed the secret";
}

}  // namespace
}  // namespace tessel
