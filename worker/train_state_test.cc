#include "worker/train_state.h"

#include <random>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TrainState Example(int64_t n = 10) {
  TrainState s;
  s.spec.set_job("ts");
  s.spec.set_strategy(v1::STRATEGY_ZERO2);
  s.spec.set_world_size(2);
  s.spec.set_num_shards(3);
  s.spec.set_bucket_bytes(4096);
  auto* t = s.spec.add_tensors();
  t->set_name("w");
  t->add_shape(n);
  t->set_dtype(v1::DTYPE_F32);
  s.spec.mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAM);
  s.spec.mutable_optimizer()->set_lr(1e-3);
  s.spec.mutable_optimizer()->set_beta1(0.9);
  s.spec.mutable_optimizer()->set_beta2(0.999);
  s.spec.mutable_optimizer()->set_eps(1e-8);
  s.step = 17;
  std::mt19937 rng(3);
  std::normal_distribution<float> d;
  for (int64_t i = 0; i < n; ++i) s.params.push_back(d(rng));
  s.state.assign(2, std::vector<float>(n));
  for (auto& slot : s.state) {
    for (float& v : slot) v = d(rng);
  }
  return s;
}

// The blob of a state whose spec encodes (every spec built here does).
std::string Encoded(const TrainState& s) {
  absl::StatusOr<std::string> blob = EncodeTrainState(s);
  EXPECT_TRUE(blob.ok()) << blob.status();
  return blob.ok() ? *blob : std::string();
}

TEST(TrainStateTest, RoundTripsBitwise) {
  TrainState s = Example();
  auto back = DecodeTrainState(Encoded(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 17);
  EXPECT_EQ(back->params, s.params);
  EXPECT_EQ(back->state, s.state);
  EXPECT_EQ(back->spec.job(), "ts");
  EXPECT_TRUE(CheckTrainStateFits(*back, s.spec).ok());
}

TEST(TrainStateTest, TensorSkipsRoundTripAndAreValidated) {
  TrainState s = Example();
  s.tensor_skips = {0};  // none skipped: not written
  auto back = DecodeTrainState(Encoded(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tensor_skips.empty());
  s.tensor_skips = {5};
  back = DecodeTrainState(Encoded(s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensor_skips, (std::vector<int64_t>{5}));
  s.tensor_skips = {18};  // more than the 17 steps
  EXPECT_EQ(DecodeTrainState(Encoded(s)).status().code(), absl::StatusCode::kDataLoss);
  s.tensor_skips = {1, 1};  // two counts for one tensor
  EXPECT_EQ(DecodeTrainState(Encoded(s)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(TrainStateTest, EveryTruncationAndEveryFlippedByteIsRefused) {
  const std::string blob = Encoded(Example(4));
  for (size_t len = 0; len < blob.size(); ++len) {
    EXPECT_FALSE(DecodeTrainState(blob.substr(0, len)).ok()) << "length " << len;
  }
  for (size_t i = 0; i < blob.size(); ++i) {
    std::string bad = blob;
    bad[i] ^= 0x20;
    EXPECT_FALSE(DecodeTrainState(bad).ok()) << "byte " << i;
  }
}

TEST(TrainStateTest, FitsChecksTensorsAndOptimizerKindOnly) {
  TrainState s = Example();
  v1::JobSpec other = s.spec;
  other.set_strategy(v1::STRATEGY_DDP);  // another strategy, world, shards: fine
  other.set_world_size(5);
  other.set_num_shards(1);
  other.mutable_optimizer()->set_lr(0.5);
  EXPECT_TRUE(CheckTrainStateFits(s, other).ok());
  other.mutable_tensors(0)->set_shape(0, 11);
  EXPECT_FALSE(CheckTrainStateFits(s, other).ok());
  other = s.spec;
  other.mutable_optimizer()->set_kind(v1::OptimizerConfig::SGD);
  absl::Status st = CheckTrainStateFits(s, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("ADAM"), std::string::npos) << st;
}

}  // namespace
}  // namespace tessel
