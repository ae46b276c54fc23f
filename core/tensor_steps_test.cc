#include "core/tensor_steps.h"

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/optimizer.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using Runs = std::vector<std::pair<Range, int64_t>>;

Runs Collect(const Layout& layout, Range r, int64_t step, const std::vector<int64_t>& skips,
             const std::vector<uint8_t>& now) {
  Runs out;
  ForEachUpdateRun(layout, r, step, skips, now,
                   [&](Range run, int64_t s) { out.emplace_back(run, s); });
  return out;
}

// Tensors a [0,15) b [15,22) empty [22,22) c [22,30).
Layout Abc() {
  auto layout = Layout::Create({{"a", {3, 5}}, {"b", {7}}, {"e", {0}}, {"c", {2, 2, 2}}}, 2, 4, 8);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

TEST(TensorStepsTest, WithoutSkipsTheWholeRangeIsOneRunAtTheJobStep) {
  const Layout l = Abc();
  EXPECT_EQ(Collect(l, Range{3, 27}, 5, {}, {}), (Runs{{Range{3, 27}, 5}}));
  EXPECT_TRUE(Collect(l, Range{4, 4}, 5, {}, {}).empty());
}

TEST(TensorStepsTest, SplitsAtTensorsWithOtherStepsAndLeavesSkippedOnesOut) {
  const Layout l = Abc();
  // b was skipped twice before; this step skips c.
  const std::vector<int64_t> skips = {0, 2, 0, 0};
  const std::vector<uint8_t> now = {0, 0, 0, 1};
  EXPECT_EQ(Collect(l, Range{3, 27}, 5, skips, now), (Runs{{Range{3, 15}, 5}, {Range{15, 22}, 3}}));
  // Equal steps on both sides of a tensor boundary merge into one run.
  EXPECT_EQ(Collect(l, Range{10, 30}, 5, {0, 0, 0, 0}, {0, 0, 0, 0}), (Runs{{Range{10, 30}, 5}}));
  // Skipping the middle tensor splits a run into two at the same step.
  EXPECT_EQ(Collect(l, Range{0, 30}, 4, {}, {0, 1, 0, 0}),
            (Runs{{Range{0, 15}, 4}, {Range{22, 30}, 4}}));
  // Everything skipped: nothing to do.
  EXPECT_TRUE(Collect(l, Range{15, 22}, 4, {}, {0, 1, 0, 0}).empty());
}

TEST(TensorStepsTest, MasksAndSavedSkipsAreValidated) {
  std::vector<uint8_t> mask;
  ASSERT_TRUE(SkipMaskFromIndices(std::vector<int32_t>{2, 0}, 4, &mask).ok());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 1, 0}));
  ASSERT_TRUE(SkipMaskFromIndices({}, 4, &mask).ok());
  EXPECT_TRUE(mask.empty());
  mask = {1};
  EXPECT_EQ(SkipMaskFromIndices(std::vector<int32_t>{4}, 4, &mask).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SkipMaskFromIndices(std::vector<int32_t>{-1}, 4, &mask).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SkipMaskFromIndices(std::vector<int32_t>{1, 1}, 4, &mask).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mask, (std::vector<uint8_t>{1})) << "a refused mask changes nothing";

  EXPECT_TRUE(ValidateSkips({}, 3, 0).ok());
  EXPECT_TRUE(ValidateSkips(std::vector<int64_t>{0, 7, 1}, 3, 7).ok());
  EXPECT_FALSE(ValidateSkips(std::vector<int64_t>{0, 8, 1}, 3, 7).ok());
  EXPECT_FALSE(ValidateSkips(std::vector<int64_t>{0, -1, 1}, 3, 7).ok());
  EXPECT_FALSE(ValidateSkips(std::vector<int64_t>{0, 1}, 3, 7).ok());

  std::vector<int64_t> skips;
  AdvanceSkips(std::vector<uint8_t>{0, 0, 0}, &skips);
  EXPECT_TRUE(skips.empty());
  AdvanceSkips(std::vector<uint8_t>{0, 1, 0}, &skips);
  AdvanceSkips(std::vector<uint8_t>{}, &skips);
  AdvanceSkips(std::vector<uint8_t>{1, 1, 0}, &skips);
  EXPECT_EQ(skips, (std::vector<int64_t>{1, 2, 0}));
  EXPECT_FALSE(NoSkips(skips));
  std::vector<int64_t> merged;
  MergeSkips(std::vector<int64_t>{0, 2}, &merged);
  MergeSkips(std::vector<int64_t>{}, &merged);
  MergeSkips(std::vector<int64_t>{3, 1, 1}, &merged);
  EXPECT_EQ(merged, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_TRUE(NoSkips(std::vector<int64_t>{0, 0}));
}

// The contract: updating a sharded, bucketed flat vector run by run equals
// torch's per-parameter loop (each tensor with its own state['step'], no
// update at all in a step without a gradient), bit for bit, for every kind
// whose update reads the step.
TEST(TensorStepsTest, BucketedRunsEqualPerTensorUpdatesWithTheirOwnSteps) {
  const Layout l = Abc();
  std::vector<OptimizerParams> kinds(4);
  kinds[0].kind = OptimizerParams::Kind::kAdam;
  kinds[0].weight_decay = 0.1f;
  kinds[1].kind = OptimizerParams::Kind::kSgd;
  kinds[1].momentum = 0.9f;
  kinds[1].weight_decay = 0.01f;
  kinds[2].kind = OptimizerParams::Kind::kAdagrad;
  kinds[2].lr_decay = 0.05f;
  kinds[2].eps = 1e-10f;
  kinds[2].initial_accumulator_value = 0.1f;
  kinds[3].kind = OptimizerParams::Kind::kAdamW;
  kinds[3].weight_decay = 0.1f;
  const int64_t n = l.num_params();
  for (const OptimizerParams& p : kinds) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> init(n);
    for (float& v : init) v = normal(rng);
    const int slots = StateSlots(p);
    // Reference: one array per tensor with its own step counter.
    std::vector<std::vector<float>> ref_w, ref_s;
    std::vector<int64_t> ref_steps(l.tensors().size(), 0);
    for (const TensorSlot& t : l.tensors()) {
      ref_w.emplace_back(init.begin() + t.offset, init.begin() + t.offset + t.numel);
    }
    std::vector<std::vector<std::vector<float>>> ref_state(l.tensors().size());
    for (size_t t = 0; t < l.tensors().size(); ++t) {
      ref_state[t].assign(slots, std::vector<float>(l.tensors()[t].numel));
      float* st[kMaxStateSlots] = {};
      for (int k = 0; k < slots; ++k) st[k] = ref_state[t][k].data();
      if (l.tensors()[t].numel > 0) InitState(p, st, l.tensors()[t].numel);
    }
    // Flat, updated bucket by bucket over both shards.
    std::vector<float> flat = init;
    std::vector<std::vector<float>> flat_state(slots, std::vector<float>(n));
    {
      float* st[kMaxStateSlots] = {};
      for (int k = 0; k < slots; ++k) st[k] = flat_state[k].data();
      InitState(p, st, n);
    }
    std::vector<int64_t> skips;
    for (int64_t step = 1; step <= 6; ++step) {
      std::vector<float> grad(n);
      for (float& g : grad) g = normal(rng);
      // a and c skipped now and then; b skipped at the first step.
      std::vector<uint8_t> now = {static_cast<uint8_t>(step % 3 == 2),
                                  static_cast<uint8_t>(step == 1), 0,
                                  static_cast<uint8_t>(step % 2 == 0)};
      for (size_t t = 0; t < l.tensors().size(); ++t) {
        const TensorSlot& ts = l.tensors()[t];
        if (now[t] || ts.numel == 0) continue;
        float* st[kMaxStateSlots] = {};
        for (int k = 0; k < slots; ++k) st[k] = ref_state[t][k].data();
        ApplyUpdate(p, ++ref_steps[t], ref_w[t].data(), grad.data() + ts.offset, st, ts.numel);
      }
      for (int shard = 0; shard < l.num_shards(); ++shard) {
        for (int b = 0; b < l.num_buckets(shard); ++b) {
          ForEachUpdateRun(
              l, l.bucket_range(shard, b), step, skips, now, [&](Range run, int64_t s) {
                float* st[kMaxStateSlots] = {};
                for (int k = 0; k < slots; ++k) st[k] = flat_state[k].data() + run.begin;
                ApplyUpdate(p, s, flat.data() + run.begin, grad.data() + run.begin, st, run.size());
              });
        }
      }
      AdvanceSkips(now, &skips);
    }
    for (size_t t = 0; t < l.tensors().size(); ++t) {
      const TensorSlot& ts = l.tensors()[t];
      if (ts.numel == 0) continue;  // (memcmp of an empty vector's null data is undefined)
      ASSERT_EQ(0, std::memcmp(ref_w[t].data(), flat.data() + ts.offset, ts.numel * sizeof(float)))
          << OptimizerKindName(p.kind) << " tensor " << ts.name;
      EXPECT_EQ(ref_steps[t], 6 - skips[t]) << ts.name;
    }
    EXPECT_EQ(skips, (std::vector<int64_t>{2, 1, 0, 3}));
  }
}

}  // namespace
}  // namespace tessel
