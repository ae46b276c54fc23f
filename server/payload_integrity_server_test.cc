// Payload integrity on a real shard server over UCX (issue 42 part 4): with
// --data_integrity=payload every frame carries a tag of its payload under
// its rank's payload key, and the header tag covers that tag. A PUSH whose
// payload changed in flight under a valid header (one byte flipped between
// seal and send) is dropped: no answer, counted, the step does not use it;
// the rank's real push is still taken, the mean is bitwise the real one and
// the PARAMS that come back carry their payload's tag. A worker from before
// payload integrity is refused its key with a message saying why.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "server/server_test_fixture.h"

namespace tessel {
namespace {

constexpr int kFloats = 1024;

FrameHeader Header(FrameType type, int64_t step, int rank, uint64_t payload_bytes) {
  return TestFrameHeader(type, "B", 1, step, rank, payload_bytes);
}

class PayloadIntegrityServerTest : public UcxShardServerTest {
 protected:
  PayloadIntegrityServerTest() {
    options_.data_auth = true;
    options_.data_integrity_payload = true;
  }
};

TEST_F(PayloadIntegrityServerTest, APushChangedInFlightIsDroppedAndTheStepUsesTheRealOne) {
  ASSERT_TRUE(CreateJob(OneBucketDdpJob("B", 2, kFloats)).ok());
  // A worker from before payload integrity asks without max_key_version.
  v1::FrameKeyResponse old;
  const grpc::Status refused = GetFrameKey("B", 1, 1, NewJobSecret(), 0, &old);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("--data_integrity"), std::string::npos)
      << refused.error_message();
  EXPECT_TRUE(old.secret().empty());
  std::shared_ptr<const RankFrameKeys> r0 = KeyOf("B", 0), r1 = KeyOf("B", 1);
  ASSERT_TRUE(r0 != nullptr && r1 != nullptr);

  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), rank1(address, kFloats);
  const std::vector<float> g0 = TwoRankGradient(0, kFloats), g1 = TwoRankGradient(1, kFloats);
  const FrameHeader push1 = Header(FrameType::kPush, 0, 1, kFloats * 4);
  const WireHeader sealed1 = r1->SealFrame(push1, /*to_worker=*/false, g1.data());
  ASSERT_EQ(sealed1.size, kPayloadSealedHeaderBytes);
  // In flight: one payload byte flipped under the valid header; and the
  // header-only seal of the same push (80 bytes: no payload tag).
  std::vector<float> changed = g1;
  reinterpret_cast<uint8_t*>(changed.data())[4 * 517 + 2] ^= 0x01;
  rank1.Send(sealed1.span(), changed.data(), kFloats * 4);
  AwaitRejectedFrames("B", 1);
  EXPECT_EQ(Stats("B").rejected_frames(), 1);
  EXPECT_EQ(Stats("B").pushed_bytes(), 0) << "the changed push was counted";
  rank1.Send(r1->Seal(push1, false), g1.data(), kFloats * 4);
  AwaitRejectedFrames("B", 2);
  EXPECT_EQ(Stats("B").rejected_frames(), 2);

  // The real pushes: both count, the mean is theirs bitwise.
  const FrameHeader push0 = Header(FrameType::kPush, 0, 0, kFloats * 4);
  rank0.Send(r0->SealFrame(push0, false, g0.data()).span(), g0.data(), kFloats * 4);
  rank1.Send(sealed1.span(), g1.data(), kFloats * 4);
  const FrameHeader pull = Header(FrameType::kPull, 1, 0, 0);
  rank0.Send(r0->SealFrame(pull, false, nullptr).span(), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1)) << "the real workers' step did not complete";
  const std::vector<float> mean = rank0.params();
  ASSERT_TRUE(IsBitwiseMean(mean, g0, g1));
  // The PARAMS came with the tag of what landed, under rank 0's down keys.
  const std::optional<FakeUcxWorker::Frame> params = rank0.last_params_frame();
  ASSERT_TRUE(params.has_value());
  ASSERT_EQ(params->wire.size(), kPayloadSealedHeaderBytes);
  EXPECT_TRUE(r0->Verify(params->wire, params->header));
  EXPECT_TRUE(r0->VerifyPayload(params->wire, params->header, mean.data()));
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4);
  EXPECT_EQ(Stats("B").step(), 1);
  EXPECT_EQ(Stats("B").rejected_frames(), 2);
}

}  // namespace
}  // namespace tessel
