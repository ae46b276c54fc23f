// StepSettings: optimizer settings and skipped tensors change only between
// steps, by the rules of the protocol, and a refusal changes nothing; a
// step's skips count only for the tensors in the shard's range.
#include "server/step_settings.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

// Tensors a (40), b (40), c (40) over two shards of 60: shard 0 holds a and
// the first half of b, in buckets of 20.
Layout MakeLayout() {
  auto layout = Layout::Create({{"a", {40}}, {"b", {40}}, {"c", {40}}}, 2, 1, 20);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

OptimizerParams Sgd(float lr) {
  OptimizerParams p;
  p.lr = lr;
  return p;
}

const auto kNoneComplete = [](int) { return false; };

TEST(StepSettingsTest, TheOptimizerChangesBetweenStepsOnly) {
  const Layout layout = MakeLayout();
  StepSettings s("job 'j' shard 0: ", layout, 0, Sgd(0.1f));
  EXPECT_EQ(s.SetOptimizer(Sgd(0.2f), 5, 3, false).code(), absl::StatusCode::kFailedPrecondition)
      << "the shard is at step 3: settings for 4";
  EXPECT_EQ(s.SetOptimizer(Sgd(0.2f), 4, 3, true).code(), absl::StatusCode::kFailedPrecondition)
      << "step 4 is already being applied";
  OptimizerParams adam = Sgd(0.2f);
  adam.kind = OptimizerParams::Kind::kAdam;
  absl::Status kind = s.SetOptimizer(adam, 4, 3, false);
  EXPECT_EQ(kind.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kind.message().rfind("job 'j' shard 0: ", 0), 0u) << kind;
  EXPECT_EQ(s.SetOptimizer(Sgd(-1.f), 4, 3, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ForUpdate(4).optimizer.lr, 0.1f) << "refusals changed nothing";
  ASSERT_TRUE(s.SetOptimizer(Sgd(0.2f), 4, 3, false).ok());
  EXPECT_EQ(s.ForUpdate(4).optimizer.lr, 0.2f);
  EXPECT_EQ(s.ForUpdate(4).step, 4);
}

TEST(StepSettingsTest, SkippedTensorsFollowTheProtocolAndCountInTheShardsRangeOnly) {
  const Layout layout = MakeLayout();
  StepSettings s("", layout, 0, Sgd(0.1f));
  EXPECT_EQ(s.SkipTensors({3}, 1, 0, kNoneComplete).code(), absl::StatusCode::kInvalidArgument)
      << "no tensor 3";
  EXPECT_EQ(s.SkipTensors({1}, 2, 0, kNoneComplete).code(), absl::StatusCode::kFailedPrecondition);
  // Bucket 2 (elements 40-59: tensor b) is complete: b can no longer be skipped.
  EXPECT_EQ(s.SkipTensors({1}, 1, 0, [](int b) { return b == 2; }).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s.ForUpdate(1).skip_now.empty()) << "refusals changed nothing";
  ASSERT_TRUE(s.SkipTensors({1, 2}, 1, 0, [](int b) { return b == 0; }).ok());
  EXPECT_EQ(s.SkipTensors({1}, 1, 0, kNoneComplete).code(), absl::StatusCode::kInvalidArgument)
      << "another rank skips another set";
  EXPECT_TRUE(s.SkipTensors({2, 1}, 1, 0, kNoneComplete).ok()) << "the same set again";
  EXPECT_EQ(s.ForUpdate(1).skip_now, (std::vector<uint8_t>{0, 1, 1}));
  s.EndStep();
  EXPECT_EQ(s.skips(), (std::vector<int64_t>{0, 1, 0})) << "c is not in shard 0's range";
  EXPECT_TRUE(s.ForUpdate(2).skip_now.empty()) << "the next step skips nothing until told";
  EXPECT_EQ(s.ForUpdate(2).skips, s.skips());
  s.ResetSkips({0, 0, 0});
  EXPECT_TRUE(s.skips().empty()) << "all zero: none";
  s.ResetSkips({2, 0, 1});
  EXPECT_EQ(s.skips(), (std::vector<int64_t>{2, 0, 1}));
}

// A job of 12 elements in units of 64 on 3 shards: shards 1 and 2 hold none.
// They have no step (core/layout.h): settings for any step are taken (a
// scheduler sets them every step while they stay at their first step),
// validated as anywhere; skipped tensors leave nothing behind.
TEST(StepSettingsTest, AShardWithoutElementsTakesSettingsForAnyStep) {
  auto layout = Layout::Create({{"bias", {11}}, {"scale", {1}}}, 3, 64, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_TRUE(layout->shard_empty(2));
  StepSettings s("job 'j' shard 2: ", *layout, 2, Sgd(0.1f));
  ASSERT_TRUE(s.SetOptimizer(Sgd(0.2f), 2, 0, false).ok());
  ASSERT_TRUE(s.SetOptimizer(Sgd(0.3f), 7, 0, false).ok());
  EXPECT_EQ(s.ForUpdate(7).optimizer.lr, 0.3f);
  EXPECT_EQ(s.SetOptimizer(Sgd(-1.f), 8, 0, false).code(), absl::StatusCode::kInvalidArgument);
  OptimizerParams adam = Sgd(0.2f);
  adam.kind = OptimizerParams::Kind::kAdam;
  EXPECT_EQ(s.SetOptimizer(adam, 8, 0, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ForUpdate(8).optimizer.lr, 0.3f) << "refusals changed nothing";
  EXPECT_EQ(s.SkipTensors({5}, 3, 0, kNoneComplete).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.SkipTensors({0}, 3, 0, kNoneComplete).ok());
  ASSERT_TRUE(s.SkipTensors({1}, 4, 0, kNoneComplete).ok()) << "no set kept from step 3";
  EXPECT_TRUE(s.ForUpdate(4).skip_now.empty());
  // Shard 0 holds the elements and keeps to the protocol.
  StepSettings first("job 'j' shard 0: ", *layout, 0, Sgd(0.1f));
  EXPECT_EQ(first.SetOptimizer(Sgd(0.2f), 2, 0, false).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessel
