#include "core/wire.h"

#include <cstring>

#include "gtest/gtest.h"

namespace tessel {
namespace {

FrameHeader Sample() {
  FrameHeader h;
  h.type = FrameType::kParams;
  h.job_id = JobId("mlp-demo");
  h.epoch = 7;
  h.step = -3;
  h.rank = 2;
  h.shard = 1;
  h.bucket = 9;
  h.code = 0;
  h.payload_bytes = uint64_t{1} << 33;
  h.bucket_count = 5;
  return h;
}

TEST(WireTest, RoundTripsEveryField) {
  FrameHeader h = Sample();
  HeaderBytes b = EncodeHeader(h);
  auto back = DecodeHeader(b.data(), b.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->type, h.type);
  EXPECT_EQ(back->job_id, h.job_id);
  EXPECT_EQ(back->epoch, h.epoch);
  EXPECT_EQ(back->step, h.step);
  EXPECT_EQ(back->rank, h.rank);
  EXPECT_EQ(back->shard, h.shard);
  EXPECT_EQ(back->bucket, h.bucket);
  EXPECT_EQ(back->payload_bytes, h.payload_bytes);
  EXPECT_EQ(back->bucket_count, h.bucket_count);
}

TEST(WireTest, LayoutIsFixedLittleEndian) {
  HeaderBytes b = EncodeHeader(Sample());
  EXPECT_EQ(b[0], 'T');
  EXPECT_EQ(b[1], 'S');
  EXPECT_EQ(b[2], 'L');
  EXPECT_EQ(b[3], '1');
  EXPECT_EQ(b[4], 1);   // version
  EXPECT_EQ(b[6], 3);   // PARAMS
  EXPECT_EQ(b[16], 7);  // epoch
  EXPECT_EQ(b[32], 2);  // rank
  EXPECT_EQ(b[52], 2);  // payload_bytes bit 33
}

TEST(WireTest, RejectsMalformedHeaders) {
  HeaderBytes good = EncodeHeader(Sample());
  EXPECT_FALSE(DecodeHeader(good.data(), 63).ok());  // truncated
  EXPECT_FALSE(DecodeHeader(good.data(), 0).ok());
  auto corrupt = [&](size_t at, uint8_t v) {
    HeaderBytes b = good;
    b[at] = v;
    return DecodeHeader(b.data(), b.size()).status();
  };
  EXPECT_NE(corrupt(0, 'X').message().find("magic"), std::string::npos);
  EXPECT_NE(corrupt(4, 2).message().find("version"), std::string::npos);
  EXPECT_NE(corrupt(6, 0).message().find("unknown frame type"), std::string::npos);
  EXPECT_NE(corrupt(6, 10).message().find("unknown frame type"), std::string::npos);
  EXPECT_NE(corrupt(60, 2).message().find("flags"), std::string::npos);
  EXPECT_NE(corrupt(44, 99).message().find("error code"), std::string::npos);
  FrameHeader push = Sample();
  push.type = FrameType::kPush;
  push.bucket_count = PushPartCount(kMaxPushParts);  // one part too many
  HeaderBytes pb = EncodeHeader(push);
  EXPECT_NE(DecodeHeader(pb.data(), pb.size()).status().message().find("PUSH bucket count"),
            std::string::npos);
  for (uint32_t index : {0u, 4u, kMaxPushParts - 1}) {  // micro-batch parts, by index
    push.bucket_count = PushPartCount(index);
    pb = EncodeHeader(push);
    absl::StatusOr<FrameHeader> back = DecodeHeader(pb.data(), pb.size());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(IsPushPart(*back));
    EXPECT_EQ(PushPartIndex(*back), index);
  }
  push.bucket_count = 0;
  EXPECT_FALSE(IsPushPart(push));
  push.bucket_count = kPushPart;
  FrameHeader init = push;
  init.type = FrameType::kInit;
  HeaderBytes ib = EncodeHeader(init);
  EXPECT_NE(DecodeHeader(ib.data(), ib.size()).status().message().find("no bucket count"),
            std::string::npos);
}

TEST(WireTest, OnlyAPushCarriesTheHoldFlag) {
  FrameHeader push = Sample();
  push.type = FrameType::kPush;
  push.bucket_count = 0;
  push.flags = kFrameHoldUpdate;
  HeaderBytes b = EncodeHeader(push);
  absl::StatusOr<FrameHeader> back = DecodeHeader(b.data(), b.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->flags, kFrameHoldUpdate);
  FrameHeader pull = Sample();
  pull.type = FrameType::kPull;
  pull.flags = kFrameHoldUpdate;
  b = EncodeHeader(pull);
  EXPECT_NE(DecodeHeader(b.data(), b.size()).status().message().find("only a PUSH"),
            std::string::npos);
}

TEST(WireTest, ReleaseCarriesItsMultiplierInTheBucketCount) {
  FrameHeader release = MakeHeader(FrameType::kRelease, JobId("j"), 1, 4, 0, 0, 0);
  const float multiplier = 0.25f;
  std::memcpy(&release.bucket_count, &multiplier, sizeof(float));
  HeaderBytes b = EncodeHeader(release);
  absl::StatusOr<FrameHeader> back = DecodeHeader(b.data(), b.size());
  ASSERT_TRUE(back.ok()) << back.status();
  float got = 0;
  std::memcpy(&got, &back->bucket_count, sizeof(float));
  EXPECT_EQ(got, multiplier);
  EXPECT_EQ(std::string(FrameTypeName(back->type)), "RELEASE");
  for (FrameType t : {FrameType::kNormAsk, FrameType::kNorm}) {
    FrameHeader h = MakeHeader(t, JobId("j"), 1, 4, 0, 0, 0);
    h.bucket_count = 1;
    b = EncodeHeader(h);
    EXPECT_FALSE(DecodeHeader(b.data(), b.size()).ok()) << FrameTypeName(t);
  }
}

TEST(WireTest, JobIdIsStableFnv1a) {
  EXPECT_EQ(JobId(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(JobId("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(JobId("job-1"), JobId("job-2"));
}

}  // namespace
}  // namespace tessel
