#include "runtime/rank_keys.h"

#include <gtest/gtest.h>

#include <cstring>

namespace tessel {
namespace {

constexpr int64_t kEpoch = 7;

FrameHeader Frame(FrameType type, int rank) {
  FrameHeader h = MakeHeader(type, JobId("mlp"), kEpoch, 41, rank, 0, 3);
  return h;
}

class RankKeysTest : public ::testing::Test {
 protected:
  std::shared_ptr<const RankFrameKeys> Rank(int rank, int group = -1, int64_t epoch = kEpoch) {
    FrameKeyGrant g{job_->RankSecret(rank, epoch), group < 0 ? "" : job_->HostSecret(group, epoch)};
    return *RankFrameKeys::Create(g, JobId("mlp"), 0, rank, epoch);
  }
  std::shared_ptr<JobFrameKeys> job_ = *JobFrameKeys::Create(NewJobSecret(), JobId("mlp"), 0);
};

TEST_F(RankKeysTest, TheServerTakesARanksFramesOnlyUnderThatRanksUpKey) {
  auto r0 = Rank(0), r1 = Rank(1);
  const FrameHeader push1 = Frame(FrameType::kPush, 1);
  EXPECT_TRUE(job_->VerifyFromWorker(r1->Seal(push1, false), push1));
  EXPECT_FALSE(job_->VerifyFromWorker(r0->Seal(push1, false), push1)) << "rank 0 as rank 1";
  // The down key (the server's toward rank 1) makes no up frame either.
  EXPECT_FALSE(job_->VerifyFromWorker(job_->SealToWorker(push1), push1));
  // Another epoch's key, another job's.
  FrameHeader later = push1;
  later.epoch = kEpoch + 1;
  EXPECT_FALSE(job_->VerifyFromWorker(r1->Seal(later, false), later));
  auto other = *JobFrameKeys::Create(NewJobSecret(), JobId("mlp"), 0);
  EXPECT_FALSE(other->VerifyFromWorker(r1->Seal(push1, false), push1));
  EXPECT_NE(job_->RankSecret(0, kEpoch), job_->RankSecret(1, kEpoch));
  EXPECT_NE(job_->RankSecret(0, kEpoch), job_->RankSecret(0, kEpoch + 1));
}

TEST_F(RankKeysTest, AWorkerTakesServerFramesOnlyUnderItsDownKey) {
  auto r0 = Rank(0), r1 = Rank(1);
  const FrameHeader params0 = Frame(FrameType::kParams, 0);
  FrameHeader error0 = params0;
  error0.type = FrameType::kError;
  EXPECT_TRUE(r0->Verify(job_->SealToWorker(params0), params0));
  EXPECT_TRUE(r0->Verify(job_->SealToWorker(error0), error0));
  // Rank 1 forging toward rank 0: with its up key, or its own down key's tag.
  EXPECT_FALSE(r0->Verify(r1->Seal(params0, false), params0));
  FrameHeader params1 = params0;
  params1.rank = 1;
  SealedHeader moved = job_->SealToWorker(params1);
  const HeaderBytes bytes = EncodeHeader(params0);
  std::memcpy(moved.data(), bytes.data(), kHeaderBytes);
  EXPECT_FALSE(r0->Verify(moved, params0));
  // A frame that is not a server's to rank 0, even under the right key.
  FrameHeader push0 = Frame(FrameType::kPush, 0);
  EXPECT_FALSE(r0->Verify(job_->SealToWorker(push0), push0));
}

TEST_F(RankKeysTest, AHostGroupsRanksTakeEachOthersFramesAndNoOneElses) {
  auto a = Rank(0, /*group=*/0), b = Rank(1, 0), stranger = Rank(2, 1), loner = Rank(3);
  const FrameHeader push = Frame(FrameType::kPush, 0), params = Frame(FrameType::kParams, 0);
  EXPECT_TRUE(b->Verify(a->Seal(push, true), push));
  EXPECT_TRUE(b->Verify(a->Seal(params, true), params));  // a forwards the server's PARAMS
  EXPECT_FALSE(b->Verify(stranger->Seal(push, true), push));
  EXPECT_FALSE(b->Verify(loner->Seal(push, true), push));
  EXPECT_FALSE(b->Verify(a->Seal(push, false), push)) << "an up key is no host key";
  FrameHeader error = params;
  error.type = FrameType::kError;
  EXPECT_FALSE(b->Verify(a->Seal(error, true), error)) << "only a server sends ERROR";
  FrameHeader as_b = push;
  as_b.rank = 1;
  EXPECT_FALSE(b->Verify(a->Seal(as_b, true), as_b)) << "nobody else is rank 1";
  EXPECT_FALSE(job_->VerifyFromWorker(a->Seal(push, true), push)) << "a server takes no host tag";
}

TEST_F(RankKeysTest, SecretsOfTheWrongSizeAreRefused) {
  EXPECT_FALSE(JobFrameKeys::Create("short", 1, 0).ok());
  EXPECT_FALSE(RankFrameKeys::Create(FrameKeyGrant{"short", ""}, 1, 0, 0, 1).ok());
  EXPECT_FALSE(RankFrameKeys::Create(FrameKeyGrant{NewJobSecret(), "short"}, 1, 0, 0, 1).ok());
}

}  // namespace
}  // namespace tessel
