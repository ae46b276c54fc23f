#include "runtime/frame_auth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace tessel {
namespace {

FrameHeader Push() {
  FrameHeader h;
  h.type = FrameType::kPush;
  h.job_id = JobId("mlp");
  h.epoch = 7;
  h.step = 41;
  h.rank = 1;
  h.shard = 2;
  h.bucket = 3;
  h.payload_bytes = 4096;
  return h;
}

std::shared_ptr<FrameAuth> Auth(const std::string& secret, const std::string& job = "mlp",
                                int shard = 2) {
  auto a = FrameAuth::Create(secret, JobId(job), shard);
  EXPECT_TRUE(a.ok()) << a.status();
  return *a;
}

absl::Span<const uint8_t> Bytes(const SealedHeader& s) { return absl::MakeConstSpan(s); }

TEST(FrameAuthTest, SecretsAreRandomAndSized) {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    const std::string s = NewJobSecret();
    EXPECT_EQ(s.size(), kJobSecretBytes);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(FrameAuth::Create("short", 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FrameAuthTest, ASealedHeaderVerifiesAndDecodes) {
  const std::string secret = NewJobSecret();
  auto sender = Auth(secret), receiver = Auth(secret);
  const SealedHeader wire = sender->Seal(Push());
  auto h = DecodeHeader(wire.data(), kHeaderBytes);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->step, 41);
  EXPECT_TRUE(receiver->Verify(Bytes(wire), *h));
  EXPECT_EQ(sender->Seal(Push()), wire) << "deterministic: same header, same epoch, same tag";
}

TEST(FrameAuthTest, EveryForgeryFails) {
  const std::string secret = NewJobSecret();
  auto receiver = Auth(secret);
  const FrameHeader h = Push();
  const SealedHeader good = Auth(secret)->Seal(h);

  // No tag at all (an unauthenticated sender), and a zero or random tag.
  const HeaderBytes bare = EncodeHeader(h);
  EXPECT_FALSE(receiver->Verify(absl::MakeConstSpan(bare), h));
  SealedHeader zero = good;
  std::fill(zero.begin() + kHeaderBytes, zero.end(), 0);
  EXPECT_FALSE(receiver->Verify(Bytes(zero), h));
  // Another job's secret (a worker of job A writing into job B).
  EXPECT_FALSE(receiver->Verify(Bytes(Auth(NewJobSecret())->Seal(h)), h));
  // Any header bit changed after sealing (here: the rank, the step).
  for (size_t byte : {size_t{24}, size_t{32}}) {
    SealedHeader flipped = good;
    flipped[byte] ^= 1;
    auto d = DecodeHeader(flipped.data(), kHeaderBytes);
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(receiver->Verify(Bytes(flipped), *d)) << "byte " << byte;
  }
  // Tag bits.
  SealedHeader tag_flipped = good;
  tag_flipped[kHeaderBytes + 5] ^= 0x80;
  EXPECT_FALSE(receiver->Verify(Bytes(tag_flipped), h));
}

TEST(FrameAuthTest, KeysDifferByEpochShardAndJob) {
  const std::string secret = NewJobSecret();
  FrameHeader h = Push();
  const SealedHeader at7 = Auth(secret)->Seal(h);
  // The same header re-stamped with another epoch by someone without the
  // key: its old tag is wrong under the new epoch's key (a replay of an old
  // epoch's frame into a new one).
  FrameHeader at8 = h;
  at8.epoch = 8;
  SealedHeader replay = Auth(secret)->Seal(at8);
  std::copy(at7.begin() + kHeaderBytes, at7.end(), replay.begin() + kHeaderBytes);
  EXPECT_FALSE(Auth(secret)->Verify(Bytes(replay), at8));
  // Tags of one header under epochs 7 and 8 differ.
  EXPECT_NE(Auth(secret)->Seal(at8), replay);
  // Another shard or job refuses a frame even with the right secret.
  EXPECT_FALSE(Auth(secret, "mlp", 3)->Verify(Bytes(at7), h));
  EXPECT_FALSE(Auth(secret, "other", 2)->Verify(Bytes(at7), h));
}

// TagOf/VerifyTag (a hybrid mesh's peer messages): the same keys over bytes
// of any length; a tag holds only for its bytes, epoch and secret, and the
// header tag of a frame is TagOf its 64 bytes.
TEST(FrameAuthTest, TagsOverAnyBytes) {
  const std::string secret = NewJobSecret();
  auto mine = Auth(secret, "mlp.mesh", -1), theirs = Auth(secret, "mlp.mesh", -1);
  const std::vector<uint8_t> msg(40, 7);
  const auto tag = mine->TagOf(msg, 3);
  EXPECT_TRUE(theirs->VerifyTag(msg, tag, 3));
  EXPECT_FALSE(theirs->VerifyTag(msg, tag, 4));  // another generation's key
  std::vector<uint8_t> changed = msg;
  changed[20] ^= 1;
  EXPECT_FALSE(theirs->VerifyTag(changed, tag, 3));
  EXPECT_FALSE(Auth(NewJobSecret(), "mlp.mesh", -1)->VerifyTag(msg, tag, 3));
  EXPECT_FALSE(Auth(secret, "other.mesh", -1)->VerifyTag(msg, tag, 3));
  EXPECT_FALSE(theirs->VerifyTag(msg, absl::MakeConstSpan(tag.data(), 15), 3));  // short tag
  const FrameHeader h = Push();
  const SealedHeader sealed = Auth(secret)->Seal(h);
  const auto of_header = Auth(secret)->TagOf(absl::MakeConstSpan(sealed.data(), kHeaderBytes), 7);
  EXPECT_TRUE(std::equal(of_header.begin(), of_header.end(), sealed.begin() + kHeaderBytes));
}

TEST(FrameAuthTest, ManyEpochsStayCorrect) {
  const std::string secret = NewJobSecret();
  auto sender = Auth(secret), receiver = Auth(secret);
  for (int64_t e = 1; e < 40; ++e) {
    FrameHeader h = Push();
    h.epoch = (e * 7) % 11;  // revisits epochs after their keys were dropped
    EXPECT_TRUE(receiver->Verify(Bytes(sender->Seal(h)), h)) << h.epoch;
  }
}

TEST(FrameAuthTest, SharedBetweenThreads) {
  const std::string secret = NewJobSecret();
  auto shared = Auth(secret);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        FrameHeader h = Push();
        h.epoch = 1 + (i + t) % 6;  // more epochs than are kept derived
        h.step = i;
        if (!shared->Verify(Bytes(shared->Seal(h)), h)) ++bad;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tessel
