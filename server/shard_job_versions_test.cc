// ShardJob's two served versions (server/served_versions.h; issue 44): a
// PULL of version v while step v+1 is in flight gets version v's bits of
// every bucket, however many of the step's buckets are updated; a PULL of
// v+1 gets the new bits as they come; version v-1 of a shard at v is
// answered until the step in flight updates a bucket, then refused.
// Checkpoints, ReadState and WriteState use the version's own buffer at both
// parities; mixed precision keeps two half copies; held steps and skipped
// tensors keep the rule; DDP keeps one buffer. And a slot reserved by a
// sender that died mid-payload is released for its replacement.
#include <cstring>
#include <optional>
#include <vector>

#include "core/precision.h"
#include "core/reduce.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "server/checkpoint_store.h"
#include "server/checkpointer.h"
#include "server/shard_job.h"
#include "server/shard_job_proto.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 3;
constexpr int kWorld = 2;
constexpr int64_t kElements = 64;  // 4 buckets of 16

v1::JobSpec Spec(v1::Strategy strategy, v1::DType dtype = v1::DTYPE_F32) {
  return OneTensorSpec("versions", strategy, kWorld, kElements, 16, dtype);
}

using Bytes = std::vector<uint8_t>;

// Bitwise equality, reported by bucket and count of differing bytes.
testing::AssertionResult Same(const std::vector<Bytes>& got, const std::vector<Bytes>& want) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "bucket counts differ";
  for (size_t b = 0; b < got.size(); ++b) {
    if (got[b] == want[b]) continue;
    size_t differ = 0;
    for (size_t i = 0; i < got[b].size() && i < want[b].size(); ++i)
      differ += got[b][i] != want[b][i];
    return testing::AssertionFailure()
           << "bucket " << b << ": " << differ << " of " << want[b].size() << " bytes differ";
  }
  return testing::AssertionSuccess();
}

class Versions {
 public:
  explicit Versions(const v1::JobSpec& spec)
      : job_(InitializedJob(spec, kEpoch)), half_(JobHalfType(spec)) {}
  ShardJob& job() { return *job_; }
  int buckets() const { return job_->layout().num_buckets(0); }

  // Rank's push of `bucket` of the step in progress (TestValue(rank, i,
  // salt)); the bucket to update if this completed it.
  std::optional<int> Push(int rank, int bucket, int salt, uint32_t flags = 0) {
    FrameHeader h = JobFrame(*job_, kEpoch, FrameType::kPush, rank, bucket);
    h.flags = flags;
    const Range br = job_->layout().bucket_range(0, bucket);
    h.payload_bytes = static_cast<uint64_t>(br.size()) * (half_ ? 2 : 4);
    absl::StatusOr<void*> dst = job_->AcceptData(h);
    EXPECT_TRUE(dst.ok()) << dst.status();
    if (!dst.ok()) return std::nullopt;
    std::vector<float> g(static_cast<size_t>(br.size()));
    for (int64_t i = br.begin; i < br.end; ++i) g[i - br.begin] = TestValue(rank, i, salt);
    if (half_) {
      FloatToHalf(*half_, g.data(), static_cast<uint16_t*>(*dst), g.size());
    } else {
      std::memcpy(*dst, g.data(), g.size() * 4);
    }
    return job_->CompleteReceive(h, absl::OkStatus()).update;
  }
  // Every rank's push of `bucket`, then its update.
  ShardJob::Serve Update(int bucket, int salt) {
    for (int r = 0; r + 1 < kWorld; ++r) EXPECT_FALSE(Push(r, bucket, salt).has_value());
    EXPECT_EQ(Push(kWorld - 1, bucket, salt), bucket);
    return job_->UpdateBucket(bucket);
  }
  void Step(int salt) {
    for (int b = 0; b < buckets(); ++b) Update(b, salt);
  }
  absl::StatusOr<ShardJob::Serve> Pull(int rank, int64_t version) {
    FrameHeader h = JobFrame(*job_, kEpoch, FrameType::kPull, rank, 0);
    h.step = version;
    h.payload_bytes = 0;
    h.bucket_count = static_cast<uint32_t>(buckets());
    return job_->AcceptPull(h, /*reply_to=*/100 + rank);
  }
  // What ServeParams sends of bucket b to a puller of `version`.
  Bytes Served(int64_t version, int b) const {
    const auto* p = static_cast<const uint8_t*>(job_->served_bucket(b, version));
    return Bytes(p, p + job_->served_bytes(b));
  }
  std::vector<Bytes> ServedAll(int64_t version) const {
    std::vector<Bytes> out;
    for (int b = 0; b < buckets(); ++b) out.push_back(Served(version, b));
    return out;
  }

 private:
  std::unique_ptr<ShardJob> job_;
  std::optional<HalfType> half_;
};

Bytes FloatBytes(const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return Bytes(p, p + v.size() * 4);
}

// The buckets a serve sends, all at `version`.
std::vector<int> SentBuckets(const ShardJob::Serve& serve, int64_t version) {
  std::vector<int> out;
  for (const ShardJob::Puller& p : serve.pullers) {
    EXPECT_EQ(p.version, version);
    out.insert(out.end(), p.buckets.begin(), p.buckets.end());
  }
  return out;
}

class ShardJobVersionsTest : public testing::TestWithParam<v1::DType> {};

// The replacement's pull (issue 44): step 1 is in flight with bucket 0
// updated; a pull of version 0 gets version 0's bits of every bucket.
TEST_P(ShardJobVersionsTest, PullOfTheVersionBeforeTheStepInFlightGetsItsBits) {
  Versions t(Spec(v1::STRATEGY_ZERO2, GetParam()));
  const std::vector<Bytes> v0 = t.ServedAll(0);
  t.Update(0, /*salt=*/1);
  ASSERT_EQ(t.job().version(), 0);
  absl::StatusOr<ShardJob::Serve> old = t.Pull(1, 0);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(SentBuckets(*old, 0), (std::vector<int>{0, 1, 2, 3})) << "answered at once";
  EXPECT_TRUE(Same(t.ServedAll(0), v0)) << "version 0's bits, bucket 0 included";
  // A pull of version 1 gets bucket 0's new bits now, the rest as they come.
  absl::StatusOr<ShardJob::Serve> next = t.Pull(0, 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(SentBuckets(*next, 1), std::vector<int>{0});
  EXPECT_FALSE(t.Served(1, 0) == v0[0]);
  EXPECT_EQ(SentBuckets(t.Update(2, 1), 1), std::vector<int>{2});
  EXPECT_TRUE(Same(t.ServedAll(0), v0)) << "still version 0's, two buckets updated";
  EXPECT_EQ(SentBuckets(t.Update(1, 1), 1), std::vector<int>{1});
  EXPECT_EQ(SentBuckets(t.Update(3, 1), 1), std::vector<int>{3});
  ASSERT_EQ(t.job().version(), 1);
  const std::vector<Bytes> v1 = t.ServedAll(1);
  for (int b = 0; b < t.buckets(); ++b) EXPECT_FALSE(v1[b] == v0[b]) << "bucket " << b;
  // Version 0 stays whole until step 2 updates a bucket: a replacement whose
  // dead predecessor took this shard to version 1 but not another shard
  // pulls it here (worker/internal/rejoin.h).
  absl::StatusOr<ShardJob::Serve> before = t.Pull(1, 0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(SentBuckets(*before, 0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(Same(t.ServedAll(0), v0));
  // Step 2 (the other parity) in flight: a pull of version 1 gets its bits,
  // and version 0 is gone once a bucket of step 2 is updated.
  t.Update(3, 2);
  EXPECT_EQ(t.Pull(1, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(t.Pull(0, 1).ok());
  EXPECT_TRUE(Same(t.ServedAll(1), v1));
  for (int b = 0; b < 3; ++b) t.Update(b, 2);
  ASSERT_EQ(t.job().version(), 2);
  for (int b = 0; b < t.buckets(); ++b) EXPECT_FALSE(t.Served(2, b) == v1[b]) << "bucket " << b;
}

// The two versions' bits are the in-place update's: the same trajectory as
// an in-place reference (fp32: the masters themselves; half: their copy).
TEST_P(ShardJobVersionsTest, EachVersionIsTheInPlaceUpdatesBits) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO1, GetParam());
  const std::optional<HalfType> half = JobHalfType(spec);
  Versions t(spec);
  std::vector<float> ref(kElements);
  for (int64_t i = 0; i < kElements; ++i) ref[i] = TestValue(0, i, 99);
  std::vector<std::vector<float>> state(2, std::vector<float>(kElements, 0.f));
  OptimizerParams adam;
  adam.kind = OptimizerParams::Kind::kAdam;
  adam.lr = 1e-2f;
  for (int step = 1; step <= 3; ++step) {
    t.Step(step);
    std::vector<std::vector<float>> g(kWorld, std::vector<float>(kElements));
    std::vector<const float*> srcs;
    for (int r = 0; r < kWorld; ++r) {
      for (int64_t i = 0; i < kElements; ++i) g[r][i] = TestValue(r, i, step);
      if (half) {  // pushed in half, widened on the shard
        std::vector<uint16_t> h(kElements);
        FloatToHalf(*half, g[r].data(), h.data(), h.size());
        HalfToFloat(*half, h.data(), g[r].data(), h.size());
      }
      srcs.push_back(g[r].data());
    }
    float* st[kMaxStateSlots] = {state[0].data(), state[1].data()};
    ReduceAndApply(adam, step, ref.data(), srcs.data(), kWorld, st, kElements, kWorld);
    ExpectBitwise(t.job().ParamsSnapshot(), ref);
    Bytes want = FloatBytes(ref);
    if (half) {
      std::vector<uint16_t> h(kElements);
      FloatToHalf(*half, ref.data(), h.data(), h.size());
      const auto* p = reinterpret_cast<const uint8_t*>(h.data());
      want.assign(p, p + h.size() * 2);
    }
    Bytes got;
    for (const Bytes& b : t.ServedAll(step)) got.insert(got.end(), b.begin(), b.end());
    EXPECT_TRUE(got == want) << "version " << step;
  }
}

// Memory: two served versions where the shard holds the parameters.
TEST_P(ShardJobVersionsTest, StatsCountBothVersions) {
  Versions t(Spec(v1::STRATEGY_ZERO1, GetParam()));
  // fp32: 2 x 4 bytes; mixed precision: 4 (masters) + 2 x 2 (half copies).
  EXPECT_EQ(t.job().Stats(false).params_bytes, kElements * 8);
}

// A held step (clipping): reduced, then applied at RELEASE; the version
// before stays served whole meanwhile, and the result is the same bits as
// the step not held.
TEST_P(ShardJobVersionsTest, HeldStepsKeepTheVersionBefore) {
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, GetParam());
  Versions held(spec), plain(spec);
  const std::vector<Bytes> v0 = held.ServedAll(0);
  for (int b = 0; b < held.buckets(); ++b) {
    EXPECT_FALSE(held.Push(0, b, 1, kFrameHoldUpdate).has_value());
    ASSERT_EQ(held.Push(1, b, 1, kFrameHoldUpdate), b);
    held.job().UpdateBucket(b);  // reduced and measured, not applied
  }
  FrameHeader release = JobFrame(held.job(), kEpoch, FrameType::kRelease, 0, 0);
  release.payload_bytes = 0;
  release.bucket_count = 0;  // the step's own settings
  absl::StatusOr<std::vector<int>> apply = held.job().AcceptRelease(release);
  ASSERT_TRUE(apply.ok()) << apply.status();
  ASSERT_EQ(apply->size(), 4u);
  held.job().UpdateBucket((*apply)[0]);
  ASSERT_TRUE(held.Pull(1, 0).ok());
  EXPECT_TRUE(Same(held.ServedAll(0), v0));
  for (size_t i = 1; i < apply->size(); ++i) held.job().UpdateBucket((*apply)[i]);
  ASSERT_EQ(held.job().version(), 1);
  plain.Step(1);
  EXPECT_TRUE(Same(held.ServedAll(1), plain.ServedAll(1)));
  EXPECT_TRUE(Same(held.ServedAll(0), v0));
}

INSTANTIATE_TEST_SUITE_P(Precisions, ShardJobVersionsTest,
                         testing::Values(v1::DTYPE_F32, v1::DTYPE_BF16),
                         [](const testing::TestParamInfo<v1::DType>& info) {
                           return info.param == v1::DTYPE_F32 ? std::string("F32")
                                                              : std::string("BF16");
                         });

std::vector<float> ReadParams(ShardJob& job, int64_t step) {
  std::vector<float> out;
  absl::Status s = job.ReadState(step, 0, 0, kElements, [&](const StateView& v) {
    out.assign(v.params.begin(), v.params.end());
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Checkpoints, ReadState, the digest and WriteState's commit at versions of
// both parities read and write that version's own buffer.
TEST(ShardJobVersionsStateTest, SnapshotsAndStateAtBothParities) {
  Versions t(Spec(v1::STRATEGY_ZERO2));
  std::string last_digest = t.job().Stats().state_digest;
  for (int step = 1; step <= 2; ++step) {
    t.Step(step);
    absl::StatusOr<std::optional<ShardSnapshot>> snap = t.job().RequestCheckpoint(step, false);
    ASSERT_TRUE(snap.ok()) << snap.status();
    ASSERT_TRUE(snap->has_value());
    const std::vector<float> params = t.job().ParamsSnapshot();
    ExpectBitwise((*snap)->values, params);
    ExpectBitwise(ReadParams(t.job(), step), params);
    Bytes served;
    for (const Bytes& b : t.ServedAll(step)) served.insert(served.end(), b.begin(), b.end());
    EXPECT_TRUE(served == FloatBytes(params)) << "step " << step;
    const std::string digest = t.job().Stats().state_digest;
    EXPECT_NE(digest, last_digest);
    last_digest = digest;
  }
  // WriteState moves the version: odd, then even; what is served and read
  // back is what was written.
  for (int64_t at : {7, 10}) {
    v1::WriteStateRequest req;
    req.set_job("versions");
    req.set_step(at);
    std::vector<float> params(kElements), slots(2 * kElements, 0.f);
    for (int64_t i = 0; i < kElements; ++i) params[i] = static_cast<float>(at * 100 + i);
    req.set_params(std::string(reinterpret_cast<const char*>(params.data()), params.size() * 4));
    req.set_state(std::string(reinterpret_cast<const char*>(slots.data()), slots.size() * 4));
    req.set_commit(true);
    absl::StatusOr<v1::WriteStateResponse> w = WriteShardState(t.job(), req);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_EQ(t.job().version(), at);
    ExpectBitwise(t.job().ParamsSnapshot(), params);
    ExpectBitwise(ReadParams(t.job(), at), params);
    Bytes served;
    for (const Bytes& b : t.ServedAll(at)) served.insert(served.end(), b.begin(), b.end());
    EXPECT_TRUE(served == FloatBytes(params)) << "step " << at;
    // The next step reads the written version.
    t.Update(0, 5);
    ASSERT_TRUE(t.Pull(0, at).ok());
    EXPECT_TRUE(t.Served(at, 1) == Bytes(served.begin() + 16 * 4, served.begin() + 32 * 4));
    for (int b = 1; b < t.buckets(); ++b) t.Update(b, 5);
    ASSERT_EQ(t.job().version(), at + 1);
  }
}

// A restore at step C (odd, then even) loads version C's buffer: it serves
// C's bits, and its next step gives the original job's next version.
TEST(ShardJobVersionsStateTest, RestoresAtBothParities) {
  Checkpointer checkpointer(std::make_unique<MemoryStore>(), absl::Seconds(1));
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2);
  Versions t(spec);
  std::vector<std::vector<Bytes>> served(4);
  for (int step = 1; step <= 3; ++step) {
    t.Step(step);
    served[step] = t.ServedAll(step);
    if (step == 3) break;
    absl::StatusOr<std::optional<ShardSnapshot>> snap = t.job().RequestCheckpoint(step, false);
    ASSERT_TRUE(snap.ok() && snap->has_value()) << snap.status();
    ASSERT_TRUE(checkpointer.Submit(std::move(**snap)).ok());
  }
  checkpointer.Drain();
  for (int64_t at : {1, 2}) {
    absl::StatusOr<Manifest> m = checkpointer.Read("versions", at);
    ASSERT_TRUE(m.ok()) << m.status();
    absl::StatusOr<std::unique_ptr<ShardJob>> restored =
        ShardJob::Restore(spec, 0, kEpoch, *m, &checkpointer);
    ASSERT_TRUE(restored.ok()) << restored.status();
    std::vector<Bytes> got;
    for (int b = 0; b < t.buckets(); ++b) {
      const auto* p = static_cast<const uint8_t*>((*restored)->served_bucket(b, at));
      got.push_back(Bytes(p, p + (*restored)->served_bytes(b)));
    }
    EXPECT_TRUE(Same(got, served[at])) << "restored at " << at;
  }
}

// A skipped tensor is carried into the new version unchanged.
TEST(ShardJobVersionsStateTest, SkippedTensorsAreCarriedIntoTheNewVersion) {
  v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2);
  spec.mutable_tensors(0)->set_shape(0, 32);
  v1::TensorSpec* second = spec.add_tensors();
  second->set_name("v");
  second->add_shape(32);
  second->set_dtype(v1::DTYPE_F32);
  Versions t(spec);
  const std::vector<float> v0 = t.job().ParamsSnapshot();
  ASSERT_TRUE(t.job().SkipTensors({1}, 1).ok());
  t.Step(1);
  const std::vector<float> v1 = t.job().ParamsSnapshot();
  EXPECT_EQ(std::memcmp(v1.data() + 32, v0.data() + 32, 32 * 4), 0) << "tensor v carried over";
  EXPECT_NE(std::memcmp(v1.data(), v0.data(), 32 * 4), 0) << "tensor w updated";
  t.Step(2);
  EXPECT_NE(std::memcmp(t.job().ParamsSnapshot().data() + 32, v0.data() + 32, 32 * 4), 0)
      << "step 2 updates tensor v from the carried values";
}

// DDP serves the mean and keeps one buffer for it.
TEST(ShardJobVersionsStateTest, DdpKeepsOneBuffer) {
  Versions t(Spec(v1::STRATEGY_DDP));
  const JobStats st = t.job().Stats(false);
  EXPECT_EQ(st.params_bytes, 0);
  EXPECT_GE(st.grad_buffer_bytes, kElements * 4);
  EXPECT_LT(st.grad_buffer_bytes, kElements * 8) << "one mean, no second version";
  t.Step(1);
  for (int b = 0; b < t.buckets(); ++b) {
    EXPECT_EQ(t.job().served_bucket(b, 0), t.job().served_bucket(b, 1));
  }
}

// A job no worker rejoins in place (JobSpec.in_place_update) keeps one
// version, updated in place, with the very bits of the two-version job; the
// version before is not served once the shard moved on.
TEST_P(ShardJobVersionsTest, InPlaceUpdateKeepsOneVersionWithTheSameBits) {
  v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, GetParam());
  Versions two(spec);
  spec.set_in_place_update(true);
  Versions one(spec);
  const bool half = JobHalfType(spec).has_value();
  EXPECT_EQ(one.job().Stats(false).params_bytes, kElements * (half ? 4 + 2 : 4));
  EXPECT_EQ(two.job().Stats(false).params_bytes, kElements * (half ? 4 + 2 * 2 : 8));
  for (int salt = 1; salt <= 3; ++salt) {
    one.Step(salt);
    two.Step(salt);
    ASSERT_TRUE(Same(one.ServedAll(salt), two.ServedAll(salt))) << "step " << salt;
  }
  for (int b = 0; b < one.buckets(); ++b) {
    EXPECT_EQ(one.job().served_bucket(b, 2), one.job().served_bucket(b, 3)) << "one buffer";
  }
  EXPECT_EQ(one.Pull(1, 2).status().code(), absl::StatusCode::kFailedPrecondition)
      << "version 2 is gone";
  EXPECT_TRUE(two.Pull(1, 2).ok()) << "the two-version job still serves it";
}

// A sender that dies with its payload on the way: the receive fails (the
// transport's error path) and the slot is released, so the stats list the
// bucket as not pushed and the rank's replacement may push it.
TEST(ShardJobVersionsStateTest, ASlotReservedByADeadSenderIsReleased) {
  Versions t(Spec(v1::STRATEGY_ZERO2));
  t.Update(0, 1);
  t.Push(0, 1, 1);
  FrameHeader h = JobFrame(t.job(), kEpoch, FrameType::kPush, 1, 1);
  h.payload_bytes = 16 * 4;
  ASSERT_TRUE(t.job().AcceptData(h).ok());
  JobStats st = t.job().Stats(false);
  ASSERT_EQ(st.waiting.size(), 2u);
  EXPECT_EQ(st.waiting[0].not_pushed, (std::vector<int>{2, 3}));
  EXPECT_EQ(st.waiting[1].receiving, std::vector<int>{1});
  EXPECT_EQ(st.waiting[1].not_pushed, (std::vector<int>{2, 3}));
  EXPECT_FALSE(t.job().CompleteReceive(h, absl::UnavailableError("peer died")).update);
  st = t.job().Stats(false);
  ASSERT_EQ(st.waiting.size(), 2u);
  EXPECT_TRUE(st.waiting[1].receiving.empty());
  EXPECT_EQ(st.waiting[1].not_pushed, (std::vector<int>{1, 2, 3}));
  // The replacement of rank 1 pulls version 0 and pushes what is missing.
  ASSERT_TRUE(t.Pull(1, 0).ok());
  EXPECT_EQ(t.Push(1, 1, 1), 1);
  t.job().UpdateBucket(1);
  for (int b : {2, 3}) t.Update(b, 1);
  EXPECT_EQ(t.job().version(), 1);
}

// A rank that pushed nothing of the step in progress owes every bucket.
TEST(ShardJobVersionsStateTest, ARankThatPushedNothingOwesEveryBucket) {
  Versions t(Spec(v1::STRATEGY_ZERO2));
  t.Push(0, 2, 1);
  const JobStats st = t.job().Stats(false);
  ASSERT_EQ(st.waiting.size(), 2u);
  EXPECT_EQ(st.waiting[0].not_pushed, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(st.waiting[1].slot, 1);
  EXPECT_EQ(st.waiting[1].not_pushed, (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace tessel
