// Payload integrity (runtime/frame_auth.h PayloadKey, runtime/rank_keys.h):
// a frame's payload tag under the payload key of its direction, carried
// between the header and the header tag, which covers it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/rank_keys.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 7;

FrameHeader Frame(FrameType type, int rank, uint64_t bytes) {
  FrameHeader h = MakeHeader(type, JobId("mlp"), kEpoch, 41, rank, 0, 3);
  h.payload_bytes = bytes;
  return h;
}

std::vector<uint8_t> Payload(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 31 + 7);
  return p;
}

class PayloadTagsTest : public ::testing::Test {
 protected:
  std::shared_ptr<const RankFrameKeys> Rank(int rank, int group = -1, bool payload = true) {
    FrameKeyGrant g{job_->RankSecret(rank, kEpoch),
                    group < 0 ? "" : job_->HostSecret(group, kEpoch), payload};
    return *RankFrameKeys::Create(g, JobId("mlp"), 0, rank, kEpoch);
  }
  std::shared_ptr<JobFrameKeys> job_ =
      *JobFrameKeys::Create(NewJobSecret(), JobId("mlp"), 0, /*payload=*/true);
};

TEST_F(PayloadTagsTest, APushWithOneFlippedPayloadByteFailsUnderAValidHeader) {
  auto r1 = Rank(1);
  std::vector<uint8_t> g = Payload(4096 + 3);
  const FrameHeader push = Frame(FrameType::kPush, 1, g.size());
  const WireHeader wire = r1->SealFrame(push, /*to_worker=*/false, g.data());
  ASSERT_EQ(wire.size, kPayloadSealedHeaderBytes);
  EXPECT_TRUE(job_->VerifyFromWorker(wire.span(), push));
  EXPECT_TRUE(job_->VerifyPayloadFromWorker(wire.span(), push, g.data()));
  for (size_t at : {size_t{0}, g.size() / 2, g.size() - 1}) {
    std::vector<uint8_t> changed = g;
    changed[at] ^= 0x01;
    EXPECT_TRUE(job_->VerifyFromWorker(wire.span(), push)) << "the header is still valid";
    EXPECT_FALSE(job_->VerifyPayloadFromWorker(wire.span(), push, changed.data())) << at;
  }
  // Another rank's payload key (rank 0 pushing rank 1's bytes) fails too.
  auto r0 = Rank(0);
  const WireHeader as_r0 = r0->SealFrame(push, false, g.data());
  EXPECT_FALSE(job_->VerifyFromWorker(as_r0.span(), push));
}

TEST_F(PayloadTagsTest, TheHeaderTagCoversThePayloadTag) {
  auto r1 = Rank(1);
  std::vector<uint8_t> g = Payload(256);
  const FrameHeader push = Frame(FrameType::kPush, 1, g.size());
  WireHeader wire = r1->SealFrame(push, false, g.data());
  for (size_t byte = kHeaderBytes; byte < kHeaderBytes + kPayloadTagBytes; ++byte) {
    WireHeader w = wire;
    w.bytes[byte] ^= 0x80;
    EXPECT_FALSE(job_->VerifyFromWorker(w.span(), push)) << "payload tag byte " << byte;
  }
  // A header-only seal (80 bytes) is not taken where payloads are tagged.
  EXPECT_FALSE(job_->VerifyFromWorker(r1->Seal(push, false), push));
  // And a 96-byte seal is not taken where they are not.
  auto header_only = *JobFrameKeys::Create(NewJobSecret(), JobId("mlp"), 0, false);
  auto plain = *RankFrameKeys::Create(FrameKeyGrant{header_only->RankSecret(1, kEpoch), ""},
                                      JobId("mlp"), 0, 1, kEpoch);
  EXPECT_EQ(plain->SealFrame(push, false, g.data()).size, kSealedHeaderBytes);
  EXPECT_TRUE(header_only->VerifyFromWorker(plain->SealFrame(push, false, g.data()).span(), push));
  EXPECT_FALSE(header_only->VerifyFromWorker(wire.span(), push));
}

TEST_F(PayloadTagsTest, AWorkerChecksParamsAndErrorsUnderItsDownPayloadKey) {
  auto r0 = Rank(0), r1 = Rank(1);
  std::vector<uint8_t> p = Payload(1000);
  const FrameHeader params0 = Frame(FrameType::kParams, 0, p.size());
  const WireHeader wire = job_->SealFrameToWorker(params0, p.data());
  ASSERT_TRUE(r0->Verify(wire.span(), params0));
  EXPECT_TRUE(r0->VerifyPayload(wire.span(), params0, p.data()));
  p[500] ^= 0x10;
  EXPECT_FALSE(r0->VerifyPayload(wire.span(), params0, p.data()));
  // An ERROR's text; an empty PARAMS (a notice).
  const std::string text = "refused";
  FrameHeader error0 = Frame(FrameType::kError, 0, text.size());
  const WireHeader e = job_->SealFrameToWorker(error0, text.data());
  EXPECT_TRUE(r0->Verify(e.span(), error0));
  EXPECT_TRUE(r0->VerifyPayload(e.span(), error0, text.data()));
  EXPECT_FALSE(r0->VerifyPayload(e.span(), error0, "REFUSED"));
  const FrameHeader notice = Frame(FrameType::kParams, 0, 0);
  const WireHeader n = job_->SealFrameToWorker(notice, nullptr);
  EXPECT_TRUE(r0->Verify(n.span(), notice));
  EXPECT_TRUE(r0->VerifyPayload(n.span(), notice, nullptr));
  // Rank 1 cannot make rank 0's payload tags.
  EXPECT_FALSE(r0->Verify(r1->SealFrame(params0, true, p.data()).span(), params0));
}

TEST_F(PayloadTagsTest, HostGroupFramesCarryTheGroupsPayloadTag) {
  auto a = Rank(0, /*group=*/5), b = Rank(1, 5), stranger = Rank(2, 6);
  std::vector<uint8_t> g = Payload(333);
  const FrameHeader push = Frame(FrameType::kPush, 0, g.size());
  const WireHeader wire = a->SealFrame(push, /*to_worker=*/true, g.data());
  ASSERT_TRUE(b->Verify(wire.span(), push));
  EXPECT_TRUE(b->VerifyPayload(wire.span(), push, g.data()));
  g[0] ^= 1;
  EXPECT_FALSE(b->VerifyPayload(wire.span(), push, g.data()));
  EXPECT_FALSE(b->Verify(stranger->SealFrame(push, true, g.data()).span(), push));
  // A forwarded PARAMS (header addressed to the aggregator a), re-sealed.
  std::vector<uint8_t> p = Payload(64);
  const FrameHeader params = Frame(FrameType::kParams, 0, p.size());
  const WireHeader fwd = a->SealFrame(params, true, p.data());
  EXPECT_TRUE(b->Verify(fwd.span(), params));
  EXPECT_TRUE(b->VerifyPayload(fwd.span(), params, p.data()));
}

TEST_F(PayloadTagsTest, TheOneTimeKeyFollowsTheHeader) {
  // Same payload under two headers (another step, another micro-batch
  // part): different tags, and neither verifies under the other header.
  auto r1 = Rank(1);
  std::vector<uint8_t> g = Payload(128);
  FrameHeader a = Frame(FrameType::kPush, 1, g.size());
  FrameHeader b = a;
  b.bucket_count = PushPartCount(1);
  const WireHeader wa = r1->SealFrame(a, false, g.data());
  const WireHeader wb = r1->SealFrame(b, false, g.data());
  EXPECT_NE(
      std::memcmp(wa.bytes.data() + kHeaderBytes, wb.bytes.data() + kHeaderBytes, kPayloadTagBytes),
      0);
  EXPECT_EQ(r1->SealFrame(a, false, g.data()).bytes, wa.bytes) << "deterministic";
}

}  // namespace
}  // namespace tessel
