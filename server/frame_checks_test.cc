// FrameChecks: each refusal of the step protocol, in order, with its code;
// stale epochs are flagged for the job's counter; pulls are ready, in
// flight, or refused.
#include "server/frame_checks.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

using Code = absl::StatusCode;

FrameChecks::Shape Shape(bool holds_params = true, double topk = 0) {
  FrameChecks::Shape s;
  s.where = "job 'f' shard 1: ";
  s.job_id = 42;
  s.shard = 1;
  s.world = 2;
  s.bucket_elements = {100, 60};
  s.push_bytes = {200, 120};  // half floats
  s.half = true;
  s.topk_ratio = topk;
  s.holds_params = holds_params;
  return s;
}

FrameHeader Frame(FrameType type, int rank, int bucket, uint64_t bytes, int64_t step = 3) {
  FrameHeader h;
  h.type = type;
  h.job_id = 42;
  h.epoch = 7;
  h.shard = 1;
  h.rank = rank;
  h.bucket = bucket;
  h.step = step;
  h.payload_bytes = bytes;
  return h;
}

const FrameChecks::State kAt3{7, 3, true};

Code Data(const FrameChecks& c, const FrameHeader& h, const FrameChecks::State& st = kAt3,
          bool seen = false, bool empty = true) {
  bool stale = false;
  return c.CheckData(h, st, seen, empty, &stale).code();
}

TEST(FrameChecksTest, EveryFrameMustBeAddressedToThisJobEpochShardAndARank) {
  const FrameChecks c(Shape());
  FrameHeader h = Frame(FrameType::kPush, 0, 0, 200);
  EXPECT_EQ(Data(c, h), Code::kOk);
  FrameHeader other = h;
  other.job_id = 41;
  EXPECT_EQ(Data(c, other), Code::kNotFound);
  FrameHeader stale = h;
  stale.epoch = 6;
  bool flagged = false;
  absl::Status s = c.CheckData(stale, kAt3, false, true, &flagged);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(flagged) << "counted as a stale-epoch frame";
  EXPECT_EQ(s.message().rfind("job 'f' shard 1: ", 0), 0u) << s;
  FrameHeader shard = h;
  shard.shard = 0;
  EXPECT_EQ(Data(c, shard), Code::kInvalidArgument);
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 2, 0, 200)), Code::kInvalidArgument);
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, -1, 0, 200)), Code::kInvalidArgument);
}

TEST(FrameChecksTest, PushesFollowTheStepProtocol) {
  const FrameChecks c(Shape());
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 2, 200)), Code::kInvalidArgument) << "bucket";
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 1, 240)), Code::kInvalidArgument)
      << "a float32 payload where half floats are due";
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 1, 120)), Code::kOk);
  EXPECT_EQ(Data(c, Frame(FrameType::kParams, 1, 1, 120)), Code::kInvalidArgument);
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 1, 120), {7, 0, false}), Code::kFailedPrecondition)
      << "before INIT";
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 1, 120, 4)), Code::kFailedPrecondition)
      << "not this step";
  EXPECT_EQ(Data(c, Frame(FrameType::kPush, 1, 1, 120), kAt3, false, /*empty=*/false),
            Code::kAlreadyExists);
  const FrameChecks topk(Shape(true, 0.1));
  EXPECT_EQ(Data(topk, Frame(FrameType::kPush, 1, 1, 121)), Code::kInvalidArgument);
}

TEST(FrameChecksTest, MicroBatchPartsAreDenseInTheJobsPrecision) {
  FrameChecks::Shape fp32 = Shape();
  fp32.half = false;
  const FrameChecks c(fp32);
  FrameHeader part = Frame(FrameType::kPush, 1, 1, 240);
  part.bucket_count = kPushPart;
  EXPECT_EQ(Data(c, part), Code::kOk);
  EXPECT_EQ(Data(c, part, kAt3, false, /*empty=*/false), Code::kAlreadyExists)
      << "one frame of a bucket from a rank at a time";
  // Half parts are summed in half (BucketReducer) by a half job...
  FrameHeader half_part = Frame(FrameType::kPush, 1, 1, 120);
  half_part.bucket_count = PushPartCount(2);
  EXPECT_EQ(Data(FrameChecks(Shape()), half_part), Code::kOk);
  // ...and refused by a float32 one, which says why.
  bool stale = false;
  const absl::Status half = c.CheckData(half_part, kAt3, false, true, &stale);
  EXPECT_EQ(half.code(), Code::kInvalidArgument);
  EXPECT_NE(half.message().find("micro-batch part of bucket 1 carries half floats (120 bytes) but "
                                "this job pushes float32 (240 bytes)"),
            std::string::npos)
      << half;
  const absl::Status fp32_to_half =
      FrameChecks(Shape()).CheckData(Frame(FrameType::kPush, 1, 1, 240), kAt3, false, true, &stale);
  EXPECT_NE(fp32_to_half.message().find("push of bucket 1 carries float32"), std::string::npos)
      << fp32_to_half;
  // Top-k parts are not summed.
  FrameHeader topk_part = Frame(FrameType::kPush, 1, 1, 120);  // the bucket's pairs
  topk_part.bucket_count = kPushPart;
  const absl::Status topk =
      FrameChecks(Shape(true, 0.1)).CheckData(topk_part, kAt3, false, true, &stale);
  EXPECT_EQ(topk.code(), Code::kFailedPrecondition);
  EXPECT_NE(topk.message().find("summed dense only"), std::string::npos) << topk;
}

TEST(FrameChecksTest, InitIsRankZerosOnceBeforeAnything) {
  const FrameChecks c(Shape());
  const FrameChecks::State fresh{7, 0, false};
  EXPECT_EQ(Data(c, Frame(FrameType::kInit, 0, 0, 400, 0), fresh), Code::kOk);
  EXPECT_EQ(Data(c, Frame(FrameType::kInit, 0, 0, 200, 0), fresh), Code::kInvalidArgument)
      << "INIT carries fp32 masters";
  EXPECT_EQ(Data(c, Frame(FrameType::kInit, 1, 0, 400, 0), fresh), Code::kPermissionDenied);
  EXPECT_EQ(Data(c, Frame(FrameType::kInit, 0, 0, 400, 0), kAt3), Code::kFailedPrecondition);
  EXPECT_EQ(Data(c, Frame(FrameType::kInit, 0, 0, 400, 0), fresh, /*seen=*/true),
            Code::kAlreadyExists);
  const FrameChecks ddp(Shape(/*holds_params=*/false));
  EXPECT_EQ(Data(ddp, Frame(FrameType::kInit, 0, 0, 400, 0), fresh), Code::kFailedPrecondition);
}

TEST(FrameChecksTest, PullsAreReadyInFlightOrRefused) {
  const FrameChecks c(Shape());
  bool stale = false;
  auto pull = [&](int64_t step, int first, uint32_t count, const FrameChecks::State& st) {
    FrameHeader h = Frame(FrameType::kPull, 0, first, 0, step);
    h.bucket_count = count;
    return c.CheckPull(h, st, &stale);
  };
  EXPECT_EQ(*pull(3, 0, 2, kAt3), FrameChecks::PullAt::kReady);
  EXPECT_EQ(*pull(4, 1, 1, kAt3), FrameChecks::PullAt::kInFlight);
  EXPECT_EQ(*pull(0, 0, 2, {7, 0, false}), FrameChecks::PullAt::kInFlight)
      << "before INIT: the first parameters";
  EXPECT_EQ(pull(2, 0, 2, kAt3).status().code(), Code::kFailedPrecondition) << "replaced";
  EXPECT_EQ(pull(5, 0, 2, kAt3).status().code(), Code::kFailedPrecondition) << "ahead";
  EXPECT_EQ(pull(3, 1, 2, kAt3).status().code(), Code::kInvalidArgument) << "buckets 1-2 of 2";
  EXPECT_EQ(*pull(3, 2, 0, kAt3), FrameChecks::PullAt::kReady) << "a notify at the end";
  FrameHeader payload = Frame(FrameType::kPull, 0, 0, 8, 3);
  EXPECT_EQ(c.CheckPull(payload, kAt3, &stale).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(stale);
}

}  // namespace
}  // namespace tessel
