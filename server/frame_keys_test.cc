// FrameKeys' grants of a rank's keys (issue 42) and their handover to a
// dead worker's replacement at the same epoch (issue 44): who gets which
// generation of the keys, what the registry must say for a handover, and
// that the earlier process's keys stop working on the server once the rank
// is handed over.
#include "server/frame_keys.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 7;
constexpr int32_t kRank = 1;

// HMAC-SHA256(secret, "tessel rank secret v2" | job id | shard | rank |
// epoch [| generation]) as runtime/rank_keys.h writes it down, computed
// here on its own.
std::string Documented(const std::string& secret, uint64_t job_id, int32_t shard, int32_t rank,
                       int64_t epoch, int32_t generation) {
  std::string info = "tessel rank secret v2";
  info.append(reinterpret_cast<const char*>(&job_id), sizeof(job_id));
  info.append(reinterpret_cast<const char*>(&shard), sizeof(shard));
  info.append(reinterpret_cast<const char*>(&rank), sizeof(rank));
  info.append(reinterpret_cast<const char*>(&epoch), sizeof(epoch));
  if (generation != 0) {
    info.append(reinterpret_cast<const char*>(&generation), sizeof(generation));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(info.data()), info.size(), digest, &len);
  return std::string(reinterpret_cast<const char*>(digest), len);
}

class FrameKeysTest : public ::testing::Test {
 protected:
  // A claim of rank kRank at kEpoch by process `claim` of membership `member`.
  static FrameKeyClaim Of(const std::string& claim, int64_t member, int32_t rank = kRank,
                          int64_t epoch = kEpoch) {
    return FrameKeyClaim{"mlp", rank, epoch, claim, member};
  }
  // A registry that holds, for the rank, the member of joined_epoch
  // `registered_` (0: none), counting the asks.
  RankHolder Registry() {
    return [this]() -> absl::StatusOr<int64_t> {
      ++asked_;
      return registered_;
    };
  }
  absl::StatusOr<int32_t> Claim(const FrameKeyClaim& c) {
    return keys_.Claim(*job_keys_, c, job_, Registry());
  }
  // A frame of rank `rank` at `epoch` as the holder of `secret` seals it.
  static SealedHeader Sealed(const std::string& secret, int32_t rank, int64_t epoch,
                             FrameType type = FrameType::kPush) {
    const FrameHeader h = MakeHeader(type, JobId("mlp"), epoch, 3, rank, 0, 0);
    auto mine = RankFrameKeys::Create(FrameKeyGrant{secret, ""}, JobId("mlp"), 0, rank, epoch);
    return (*mine)->Seal(h, /*to_worker=*/false);
  }
  bool ServerTakes(const std::string& secret, int32_t rank = kRank, int64_t epoch = kEpoch) {
    const FrameHeader h = MakeHeader(FrameType::kPush, JobId("mlp"), epoch, 3, rank, 0, 0);
    return job_keys_->VerifyFromWorker(Sealed(secret, rank, epoch), h);
  }

  FrameKeys keys_{/*enabled=*/true};
  std::shared_ptr<JobFrameKeys> job_keys_ = keys_.For(JobId("mlp"), 0);
  std::shared_ptr<const void> job_ = std::make_shared<int>(0);  // the job instance
  int64_t registered_ = 0;
  int asked_ = 0;
};

TEST_F(FrameKeysTest, GenerationZeroIsTheSecretFromBeforeHandovers) {
  const std::string secret = NewJobSecret();
  auto job = *JobFrameKeys::Create(secret, JobId("mlp"), 2);
  EXPECT_EQ(job->RankSecret(kRank, kEpoch), Documented(secret, JobId("mlp"), 2, kRank, kEpoch, 0));
  EXPECT_EQ(job->RankSecret(kRank, kEpoch, 0), job->RankSecret(kRank, kEpoch));
  EXPECT_EQ(job->RankSecret(kRank, kEpoch, 1),
            Documented(secret, JobId("mlp"), 2, kRank, kEpoch, 1));
  EXPECT_NE(job->RankSecret(kRank, kEpoch, 1), job->RankSecret(kRank, kEpoch, 0));
  EXPECT_NE(job->RankSecret(kRank, kEpoch, 2), job->RankSecret(kRank, kEpoch, 1));
  EXPECT_EQ(job->Generation(kRank, kEpoch), 0);
}

TEST_F(FrameKeysTest, TheFirstClaimAndItsRetriesGetGenerationZeroWithoutAskingTheRegistry) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  ASSERT_EQ(*Claim(Of("process B", 3, /*rank=*/0)), 0);  // another rank: its own first claim
  EXPECT_EQ(asked_, 0);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 0);
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(kRank, kEpoch)));
}

TEST_F(FrameKeysTest, TheRegisteredReplacementTakesTheRankOverAndTheOldKeysStopWorking) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  const std::string old_secret = job_keys_->RankSecret(kRank, kEpoch, 0);
  ASSERT_TRUE(ServerTakes(old_secret));
  // A died; its lease lapsed; B joined as the rank's worker at epoch 9.
  registered_ = 9;
  absl::StatusOr<int32_t> b = Claim(Of("process B", 9));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, 1);
  EXPECT_EQ(asked_, 1);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 1);
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch), 1);
  const std::string new_secret = job_keys_->RankSecret(kRank, kEpoch, 1);
  EXPECT_NE(new_secret, old_secret);
  // A, if it was only stalled and wakes up, is fenced: its frames no longer
  // verify, B's do, under generation 1.
  EXPECT_FALSE(ServerTakes(old_secret));
  int32_t generation = -1;
  const FrameHeader h = MakeHeader(FrameType::kPush, JobId("mlp"), kEpoch, 3, kRank, 0, 0);
  EXPECT_TRUE(job_keys_->VerifyFromWorker(Sealed(new_secret, kRank, kEpoch), h, &generation));
  EXPECT_EQ(generation, 1);
  // The server seals toward the rank under B's down key, not A's.
  const FrameHeader params = MakeHeader(FrameType::kParams, JobId("mlp"), kEpoch, 3, kRank, 0, 0);
  const SealedHeader down = job_keys_->SealToWorker(params);
  auto a_keys =
      *RankFrameKeys::Create(FrameKeyGrant{old_secret, ""}, JobId("mlp"), 0, kRank, kEpoch);
  auto b_keys =
      *RankFrameKeys::Create(FrameKeyGrant{new_secret, ""}, JobId("mlp"), 0, kRank, kEpoch);
  EXPECT_TRUE(b_keys->Verify(down, params));
  EXPECT_FALSE(a_keys->Verify(down, params));
  // The other ranks keep theirs.
  EXPECT_EQ(job_keys_->Generation(0, kEpoch), 0);
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(0, kEpoch), 0));

  // B retried: the same answer, no new handover. A asking again: refused
  // (the registry holds B), nothing changes.
  EXPECT_EQ(*Claim(Of("process B", 9)), 1);
  absl::StatusOr<int32_t> a = Claim(Of("process A", 5));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(a.status().message().find("rank 1"), std::string::npos) << a.status();
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch), 1);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 1);
  EXPECT_TRUE(ServerTakes(new_secret));

  // B dies too; C replaces it: generation 2.
  registered_ = 12;
  EXPECT_EQ(*Claim(Of("process C", 12)), 2);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 2);
  EXPECT_FALSE(ServerTakes(new_secret));
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(kRank, kEpoch, 2)));
}

// What the caller abandons on (ShardJob::AbandonReceives): a handover only,
// never a first claim, a retry, a refusal or a new epoch.
TEST_F(FrameKeysTest, ClaimSaysWhetherItHandedTheRankOver) {
  const auto claim = [&](const FrameKeyClaim& c) {
    bool handed_over = true;
    absl::StatusOr<int32_t> got = keys_.Claim(*job_keys_, c, job_, Registry(), &handed_over);
    return std::make_pair(got.status().code(), handed_over);
  };
  using P = std::pair<absl::StatusCode, bool>;
  const P first = claim(Of("process A", 5)), retry = claim(Of("process A", 5));
  EXPECT_EQ(first, P(absl::StatusCode::kOk, false));
  EXPECT_EQ(retry, P(absl::StatusCode::kOk, false));
  const P refused = claim(Of("process B", 9));  // the registry holds no worker now
  EXPECT_EQ(refused, P(absl::StatusCode::kPermissionDenied, false));
  registered_ = 9;
  const P handover = claim(Of("process B", 9)), again = claim(Of("process B", 9));
  EXPECT_EQ(handover, P(absl::StatusCode::kOk, true));
  EXPECT_EQ(again, P(absl::StatusCode::kOk, false)) << "a retry of the replacement";
  const P next_epoch = claim(Of("process B", 9, kRank, kEpoch + 1));
  EXPECT_EQ(next_epoch, P(absl::StatusCode::kOk, false)) << "a new epoch starts over";
}

// Frames untagged (--data_auth off): no keys anywhere, but the claims are
// decided alike, so a replacement is told apart from a retry.
TEST_F(FrameKeysTest, OffTheClaimsAreStillDecidedWithoutKeys) {
  FrameKeys off(/*enabled=*/false);
  EXPECT_EQ(off.For(JobId("mlp"), 0), nullptr);
  std::shared_ptr<JobFrameKeys> claims = off.ClaimsOf(JobId("mlp"), 0);
  ASSERT_NE(claims, nullptr);
  EXPECT_EQ(off.Find(JobId("mlp")), nullptr) << "nothing the data plane would seal or verify with";
  EXPECT_EQ(off.ClaimsOf(JobId("mlp"), 0), claims);
  bool handed_over = true;
  ASSERT_TRUE(off.Claim(*claims, Of("process A", 5), job_, Registry(), &handed_over).ok());
  EXPECT_FALSE(handed_over);
  registered_ = 9;
  ASSERT_TRUE(off.Claim(*claims, Of("process B", 9), job_, Registry(), &handed_over).ok());
  EXPECT_TRUE(handed_over);
  ASSERT_TRUE(off.Claim(*claims, Of("process B", 9), job_, Registry(), &handed_over).ok());
  EXPECT_FALSE(handed_over) << "a retry";
  EXPECT_EQ(off.handovers(JobId("mlp")), 1);
}

TEST_F(FrameKeysTest, NoHandoverUnlessTheRegistrySaysTheClaimIsTheRanksWorkerAndTheHolderIsNot) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  auto refused = [&](const FrameKeyClaim& c, absl::string_view why) {
    absl::StatusOr<int32_t> got = Claim(c);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << why;
    EXPECT_NE(got.status().message().find("rank 1"), std::string::npos) << got.status();
  };
  // The registry holds no worker for the rank.
  registered_ = 0;
  refused(Of("process B", 9), "no registered worker");
  // It holds one, of another membership than the claim's.
  registered_ = 9;
  refused(Of("process B", 8), "not the registered worker");
  // The claim names none (a worker from before handovers): the registry is not asked.
  const int asked = asked_;
  refused(Of("process B", 0), "member_epoch 0");
  EXPECT_EQ(asked_, asked);
  // The holder is still the registered worker: another process claiming its
  // membership gets nothing.
  registered_ = 5;
  refused(Of("process B", 5), "the holder is registered");
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch), 0);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 0);
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(kRank, kEpoch)));
  // A itself still gets its keys.
  EXPECT_EQ(*Claim(Of("process A", 5)), 0);
  // No registry at all: no handover.
  absl::StatusOr<int32_t> none = keys_.Claim(*job_keys_, Of("process B", 5), job_);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(FrameKeysTest, AnUnreachableRegistryGrantsNothingAndTheClaimMayBeRetried) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  RankHolder down = []() -> absl::StatusOr<int64_t> {
    return absl::UnavailableError("registry at 127.0.0.1:1 GetView(mlp): connection refused");
  };
  absl::StatusOr<int32_t> got = keys_.Claim(*job_keys_, Of("process B", 9), job_, down);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find("connection refused"), std::string::npos) << got.status();
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch), 0);
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(kRank, kEpoch)));
  registered_ = 9;
  EXPECT_EQ(*Claim(Of("process B", 9)), 1);  // the worker's retry
}

// A process whose lease lapsed and that joined again began a new
// membership: its old claim's membership ended, whichever process holds
// the new one, and its own claim under the new one is a new claim too: new
// keys if it is the registered worker, nothing otherwise.
TEST_F(FrameKeysTest, ALapsedAndRejoinedHoldersOldMembershipKeepsNothing) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  registered_ = 9;  // A re-joined: a new membership
  EXPECT_EQ(*Claim(Of("process B", 9)), 1) << "the old membership ended: a handover";

  FrameKeys other(/*enabled=*/true);
  std::shared_ptr<JobFrameKeys> keys = other.For(JobId("mlp"), 0);
  ASSERT_EQ(*other.Claim(*keys, Of("process A", 5), job_, Registry()), 0);
  // A asks again after its re-join, naming its new membership: new keys.
  EXPECT_EQ(*other.Claim(*keys, Of("process A", 9), job_, Registry()), 1);
  EXPECT_EQ(*other.Claim(*keys, Of("process A", 9), job_, Registry()), 1) << "a retry";
  EXPECT_EQ(*other.Claim(*keys, Of("process A", 0), job_, Registry()), 1) << "names none";
  absl::StatusOr<int32_t> b = other.Claim(*keys, Of("process B", 9), job_, Registry());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kPermissionDenied);
  // A naming a membership the registry does not hold for the rank: refused,
  // and its keys stay as they are.
  registered_ = 12;
  absl::StatusOr<int32_t> stale = other.Claim(*keys, Of("process A", 11), job_, Registry());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(keys->Generation(kRank, kEpoch), 1);
  EXPECT_EQ(other.handovers(JobId("mlp")), 1);
}

// The registry is asked without the lock: claims racing through that
// window are decided on the grant as it is once they are back. Of several
// processes claiming the registered membership at once, one is handed the
// rank; the others then find it held by that membership and are refused.
TEST_F(FrameKeysTest, OfRacingClaimsOfTheRegisteredMembershipOneIsHandedTheRank) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  RankHolder slow = []() -> absl::StatusOr<int64_t> {
    absl::SleepFor(absl::Milliseconds(5));
    return 9;
  };
  constexpr int kClaims = 4;
  std::vector<absl::StatusOr<int32_t>> got(kClaims, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClaims; ++i) {
    threads.emplace_back([&, i] {
      got[i] = keys_.Claim(*job_keys_, Of(absl::StrCat("process ", i), 9), job_, slow);
    });
  }
  for (std::thread& t : threads) t.join();
  int granted = 0;
  for (const absl::StatusOr<int32_t>& g : got) {
    if (g.ok()) {
      ++granted;
      EXPECT_EQ(*g, 1);
    } else {
      EXPECT_EQ(g.status().code(), absl::StatusCode::kPermissionDenied) << g.status();
    }
  }
  EXPECT_EQ(granted, 1);
  EXPECT_EQ(keys_.handovers(JobId("mlp")), 1);
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch), 1);
}

TEST_F(FrameKeysTest, ANewEpochStartsAtGenerationZeroAndAnOlderOneIsStale) {
  ASSERT_EQ(*Claim(Of("process A", 5)), 0);
  registered_ = 9;
  ASSERT_EQ(*Claim(Of("process B", 9)), 1);
  // A recovery's new epoch: claimed afresh, no generation carried over.
  EXPECT_EQ(*Claim(Of("process C", 11, kRank, kEpoch + 1)), 0);
  EXPECT_EQ(job_keys_->Generation(kRank, kEpoch + 1), 0);
  EXPECT_TRUE(ServerTakes(job_keys_->RankSecret(kRank, kEpoch + 1), kRank, kEpoch + 1));
  EXPECT_EQ(Claim(Of("process B", 9)).status().code(), absl::StatusCode::kFailedPrecondition);
  // A job recreated under the same name starts over.
  job_ = std::make_shared<int>(1);
  EXPECT_EQ(*Claim(Of("process D", 13)), 1) << "the key generation of (rank, epoch) stays";
}

}  // namespace
}  // namespace tessel
