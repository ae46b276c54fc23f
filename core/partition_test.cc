// PartitionPlan: refusals name the tensor and the numbers; the layouts of an
// example by hand; and, over random models, Slice then Assemble is the
// identity and every element of a split tensor is held by exactly one tensor
// rank.
#include "core/partition.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

std::vector<TensorSpec> TwoLayers(int stage1 = 1) {
  return {{"fc0.weight", {8, 3}, TensorSplit::kDim0, 0},
          {"fc0.bias", {8}, TensorSplit::kDim0, 0},
          {"fc1.weight", {2, 8}, TensorSplit::kDim1, stage1},
          {"fc1.bias", {2}, TensorSplit::kReplicated, stage1}};
}

std::string Refusal(std::vector<TensorSpec> tensors, int tp, int pp) {
  auto plan = PartitionPlan::Create(std::move(tensors), tp, pp);
  EXPECT_FALSE(plan.ok());
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(PartitionPlanTest, RefusesNamingTheTensorAndTheNumbers) {
  EXPECT_THAT(Refusal(TwoLayers(), 3, 2),
              HasSubstr("tensor 'fc0.weight' [8, 3]: split along dim 0 over tp=3 ranks, but 8 is "
                        "not divisible by 3 (remainder 2)"));
  auto cols = TwoLayers();
  cols[0].split = TensorSplit::kReplicated;
  cols[1].split = TensorSplit::kReplicated;
  cols[2].shape = {2, 9};
  EXPECT_THAT(Refusal(cols, 2, 2), HasSubstr("tensor 'fc1.weight' [2, 9]: split along dim 1 over "
                                             "tp=2 ranks, but 9 is not divisible by 2"));
  EXPECT_THAT(Refusal(TwoLayers(2), 1, 2),
              HasSubstr("tensor 'fc1.weight' [2, 8]: stage 2 is outside [0, pp=2)"));
  EXPECT_THAT(Refusal(TwoLayers(0), 1, 2), HasSubstr("stage 1 of pp=2 holds no tensor"));
  auto twice = TwoLayers();
  twice[3].name = "fc0.bias";
  EXPECT_THAT(Refusal(twice, 1, 2), HasSubstr("tensor name 'fc0.bias' appears twice"));
  auto unnamed = TwoLayers();
  unnamed[1].name = "";
  EXPECT_THAT(Refusal(unnamed, 1, 2), HasSubstr("a tensor of shape [8] has no name"));
  auto cube = TwoLayers();
  cube[0].shape = {2, 2, 2};
  EXPECT_THAT(Refusal(cube, 1, 2), HasSubstr("a shape is [n] or [rows, cols], got 3"));
  auto zero = TwoLayers();
  zero[0].shape = {0, 3};
  EXPECT_THAT(Refusal(zero, 1, 2), HasSubstr("tensor 'fc0.weight' [0, 3]: sizes must be >= 1"));
  auto vec = TwoLayers();
  vec[3].split = TensorSplit::kDim1;
  EXPECT_THAT(Refusal(vec, 2, 2),
              HasSubstr("tensor 'fc1.bias' [2]: split along dim 1 needs a 2-D"));
  EXPECT_THAT(Refusal(TwoLayers(), 0, 2), HasSubstr("tp and pp must each be >= 1, got tp=0"));
}

TEST(PartitionPlanTest, LayoutsOfAColumnRowPairOverTwoStages) {
  auto plan = PartitionPlan::Create(TwoLayers(), 2, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->full_size(), 8u * 3 + 8 + 2 * 8 + 2);
  EXPECT_EQ(plan->full_offset(2), 32u);
  EXPECT_EQ(plan->Find("fc1.bias"), 3);
  EXPECT_EQ(plan->Find("nope"), -1);
  ASSERT_EQ(plan->partition(0).size(), 2u);
  ASSERT_EQ(plan->partition(1).size(), 2u);
  EXPECT_EQ(plan->partition(0)[0].shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(plan->partition(0)[1].offset, 12u);
  EXPECT_EQ(plan->partition_size(0), 16u);
  EXPECT_EQ(plan->partition(1)[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(plan->entry(3).offset, 8u);
  EXPECT_EQ(plan->partition_size(1), 10u);
  const std::vector<TensorDesc> layout = plan->Layout(1);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].name, "fc1.weight");
  EXPECT_EQ(layout[0].shape, (std::vector<int64_t>{2, 4}));
  // fc1.weight on tensor rank 1: columns 4..7 of each of its 2 rows.
  const std::vector<CopyRun> runs = plan->Runs(2, 1);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].full_offset, 32u + 4);
  EXPECT_EQ(runs[1].full_offset, 32u + 8 + 4);
  EXPECT_EQ(runs[1].part_offset, 4u);
  EXPECT_EQ(runs[1].count, 4u);
  // fc0.weight on tensor rank 1: rows 4..7, one run.
  EXPECT_EQ(plan->Runs(0, 1)[0].full_offset, 12u);

  std::vector<float> full(plan->full_size());
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  auto part = plan->Slice(full, 1, 1);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ((*part)[0], 36.0f);  // fc1.weight[0][4]
  EXPECT_EQ((*part)[8], 48.0f);  // fc1.bias[0], replicated
  EXPECT_FALSE(plan->Slice(full, 2, 0).ok());
  EXPECT_THAT(
      std::string(plan->Slice(absl::MakeConstSpan(full).subspan(1), 0, 0).status().message()),
      HasSubstr("the full vector has 49 floats, the model 50"));
}

TEST(PartitionPlanTest, AssembleRefusesDivergedReplicasAndWrongSizes) {
  auto plan = PartitionPlan::Create(TwoLayers(), 2, 2);
  ASSERT_TRUE(plan.ok());
  std::vector<float> full(plan->full_size(), 1.0f);
  std::vector<std::vector<float>> parts;
  for (int p = 0; p < 2; ++p) {
    for (int t = 0; t < 2; ++t) parts.push_back(*plan->Slice(full, p, t));
  }
  EXPECT_TRUE(plan->Assemble(parts).ok());
  auto bad = parts;
  bad[3][plan->entry(3).offset + 1] = 2.0f;  // fc1.bias on (stage 1, tensor rank 1)
  auto back = plan->Assemble(bad);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()),
              HasSubstr("replicated tensor fc1.bias of stage 1 differs between tensor ranks 0 and "
                        "1 at element 1 (1 vs 2)"));
  bad = parts;
  bad.pop_back();
  EXPECT_THAT(std::string(plan->Assemble(bad).status().message()),
              HasSubstr("Assemble needs pp*tp = 4 partitions, got 3"));
  bad = parts;
  bad[2].push_back(0);
  EXPECT_THAT(std::string(plan->Assemble(bad).status().message()),
              HasSubstr("partition (stage 1, tensor rank 0) has 11 floats, expected 10"));
}

// Property test: random models of 1..8 tensors, every split, tp in 1..4,
// pp in 1..3.
TEST(PartitionPlanTest, SliceThenAssembleIsTheIdentityOverRandomModels) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int tp = pick(1, 4);
    const int pp = pick(1, 3);
    const int n = pick(pp, 8);
    std::vector<TensorSpec> specs;
    for (int i = 0; i < n; ++i) {
      TensorSpec s;
      s.name = absl::StrCat("t", i);
      s.split = static_cast<TensorSplit>(pick(0, 2));
      if (s.split == TensorSplit::kDim1 || pick(0, 1) == 1) {
        s.shape = {pick(1, 3), pick(1, 3)};
      } else {
        s.shape = {pick(1, 5)};
      }
      if (s.split == TensorSplit::kDim0) s.shape[0] *= tp;
      if (s.split == TensorSplit::kDim1) s.shape[1] *= tp;
      s.stage = i < pp ? i : pick(0, pp - 1);  // every stage gets one
      specs.push_back(s);
    }
    auto plan = PartitionPlan::Create(specs, tp, pp);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<float> full(plan->full_size());
    for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i) + 0.5f;
    std::vector<std::vector<float>> parts;
    std::vector<int> holders(full.size(), 0);
    for (int p = 0; p < pp; ++p) {
      for (int t = 0; t < tp; ++t) {
        auto part = plan->Slice(full, p, t);
        ASSERT_TRUE(part.ok());
        for (float v : *part) ++holders[static_cast<size_t>(v)];
        parts.push_back(std::move(*part));
      }
    }
    for (size_t i = 0; i < full.size(); ++i) {
      int tensor = 0;
      while (tensor + 1 < n && plan->full_offset(tensor + 1) <= i) ++tensor;
      const bool replicated = specs[tensor].split == TensorSplit::kReplicated;
      ASSERT_EQ(holders[i], replicated ? tp : 1) << "element " << i << " of " << specs[tensor].name;
    }
    auto back = plan->Assemble(parts);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(*back, full);
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

}  // namespace
}  // namespace tessel
