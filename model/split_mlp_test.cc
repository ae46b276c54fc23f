#include "model/split_mlp.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/dataset.h"
#include "model/mlp.h"

namespace tessel::model {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (float& e : v) e = 2.0f * static_cast<float>(gen() >> 8) * 0x1.0p-24f - 1.0f;
  return v;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::vector<float>> SliceAll(const SplitMlp& split, const std::vector<float>& full) {
  std::vector<std::vector<float>> parts;
  for (int p = 0; p < split.pp(); ++p) {
    for (int t = 0; t < split.tp(); ++t) parts.push_back(split.Slice(full, p, t));
  }
  return parts;
}

TEST(SplitMlpTest, RefusesBadConfigurationsNamingWhatToChange) {
  auto s = SplitMlp::Create({16, 32, 32, 4}, 2, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("pp=4"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("use pp <= 3"));

  s = SplitMlp::Create({16, 30, 32, 4}, 4, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("tp=4 does not divide hidden size 30"));
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("output of fc0"));

  s = SplitMlp::Create({16, 4}, 2, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("at least 2 layers"));

  EXPECT_FALSE(SplitMlp::Create({16, 32, 4}, 0, 1).ok());
  EXPECT_FALSE(SplitMlp::Create({16, 32, 4}, 1, 0).ok());
  EXPECT_FALSE(SplitMlp::Create({16}, 1, 1).ok());
  // Only the split hidden sizes must be divisible: fc1's output (33) is not split.
  EXPECT_TRUE(SplitMlp::Create({16, 32, 33, 4}, 2, 1).ok());
}

TEST(SplitMlpTest, PlansPairsStagesAndPartitions) {
  auto split = SplitMlp::Create({16, 32, 32, 4}, 2, 2);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->split(0), LayerSplit::kColumn);
  EXPECT_EQ(split->split(1), LayerSplit::kRow);
  EXPECT_EQ(split->split(2), LayerSplit::kReplicated);
  EXPECT_EQ(split->stage_begin(0), 0);
  EXPECT_EQ(split->stage_end(0), 1);
  EXPECT_EQ(split->stage_begin(1), 1);
  EXPECT_EQ(split->stage_end(1), 3);
  EXPECT_EQ(split->stage_in(0), 16);
  EXPECT_EQ(split->stage_out(0), 16);  // fc0's output, split over 2 ranks
  EXPECT_EQ(split->stage_in(1), 16);
  EXPECT_EQ(split->stage_out(1), 4);
  // Stage 0 on one rank: fc0.weight [16, 16], fc0.bias [16].
  EXPECT_EQ(split->partition_size(0), 16u * 16 + 16);
  // Stage 1: fc1.weight [32, 16], fc1.bias [32], fc2.weight [4, 32], fc2.bias [4].
  EXPECT_EQ(split->partition_size(1), 32u * 16 + 32 + 4 * 32 + 4);
  EXPECT_EQ(split->partition_tensors(1)[0].name, "fc1.weight");
  EXPECT_EQ(split->partition_tensors(1)[0].shape, (std::vector<int64_t>{32, 16}));
  EXPECT_TRUE(split->replicated(1, /*is_bias=*/true));
  EXPECT_FALSE(split->replicated(1, /*is_bias=*/false));
  EXPECT_TRUE(split->replicated(2, /*is_bias=*/false));
}

TEST(SplitMlpTest, SliceThenAssembleIsIdentity) {
  const std::vector<std::vector<int>> shapes = {
      {16, 32, 32, 4}, {8, 12, 6}, {5, 8, 8, 8, 8, 3}, {7, 3}};
  for (const auto& sizes : shapes) {
    for (int tp : {1, 2, 4}) {
      for (int pp = 1; pp <= static_cast<int>(sizes.size()) - 1; ++pp) {
        auto split = SplitMlp::Create(sizes, tp, pp);
        if (!split.ok()) continue;  // e.g. tp not dividing
        const std::vector<float> full = RandomVector(split->model().num_params(), tp * 10 + pp);
        std::vector<std::vector<float>> parts = SliceAll(*split, full);
        size_t held = 0;
        for (int p = 0; p < pp; ++p) held += split->partition_size(p);
        EXPECT_GE(held, full.size() / tp);
        auto back = split->Assemble(parts);
        ASSERT_TRUE(back.ok()) << back.status();
        EXPECT_TRUE(BitwiseEqual(*back, full)) << "tp " << tp << " pp " << pp;
      }
    }
  }
}

TEST(SplitMlpTest, AssembleRefusesDivergedReplicas) {
  auto split = SplitMlp::Create({16, 32, 32, 4}, 2, 1);
  ASSERT_TRUE(split.ok());
  const std::vector<float> full = RandomVector(split->model().num_params(), 3);
  std::vector<std::vector<float>> parts = SliceAll(*split, full);
  parts[1][split->bias(1).offset + 5] += 1.0f;  // fc1.bias on tensor rank 1
  auto back = split->Assemble(parts);
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(std::string(back.status().message()),
              HasSubstr("replicated tensor fc1.bias of stage 0 differs between tensor ranks 0 "
                        "and 1 at element 5"));
}

// tp = 1 and one micro-batch: the split arithmetic is Mlp's, bit for bit,
// whatever the pipeline cut.
TEST(SplitMlpTest, ReferenceWithoutTensorSplitOrMicroBatchesIsMlpBitwise) {
  const std::vector<int> sizes = {16, 32, 32, 4};
  const Mlp model(sizes);
  std::vector<float> full(model.num_params());
  model.Init(full.data(), 7);
  Dataset data = MakeClusters(64, 16, 4, 1);
  const int batch = 8;
  Dataset b = Batch(data, 0, 0, 1, batch);
  std::vector<float> want(model.num_params());
  const float want_loss =
      model.LossAndGrad(full.data(), b.x.data(), b.y.data(), batch, want.data());
  for (int pp = 1; pp <= 3; ++pp) {
    auto split = SplitMlp::Create(sizes, 1, pp);
    ASSERT_TRUE(split.ok());
    std::vector<std::vector<float>> grads;
    const float loss =
        split->ReferenceGradients(SliceAll(*split, full), b.x.data(), b.y.data(), batch, 1, &grads);
    auto got = split->Assemble(grads);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(BitwiseEqual(*got, want)) << "pp " << pp;
    EXPECT_EQ(loss, want_loss);
  }
}

// With tensor splits and micro-batches the sums run in another order: the
// result is the same gradient up to rounding.
TEST(SplitMlpTest, ReferenceWithSplitsMatchesMlpUpToRounding) {
  for (const auto& sizes : std::vector<std::vector<int>>{{16, 32, 32, 4}, {16, 32, 32, 32, 4}}) {
    const Mlp model(sizes);
    std::vector<float> full(model.num_params());
    model.Init(full.data(), 9);
    Dataset data = MakeClusters(64, 16, 4, 2);
    const int batch = 8;
    Dataset b = Batch(data, 1, 0, 1, batch);
    std::vector<float> want(model.num_params());
    const float want_loss =
        model.LossAndGrad(full.data(), b.x.data(), b.y.data(), batch, want.data());
    for (int tp : {2, 4}) {
      for (int micro : {1, 2, 4}) {
        auto split = SplitMlp::Create(sizes, tp, 2);
        ASSERT_TRUE(split.ok()) << split.status();
        std::vector<std::vector<float>> grads;
        const float loss = split->ReferenceGradients(SliceAll(*split, full), b.x.data(), b.y.data(),
                                                     batch, micro, &grads);
        auto got = split->Assemble(grads);
        ASSERT_TRUE(got.ok()) << got.status();
        double worst = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          worst = std::max(worst, std::fabs(static_cast<double>((*got)[i]) - want[i]));
        }
        EXPECT_LT(worst, 1e-6) << "tp " << tp << " micro " << micro;
        EXPECT_NEAR(loss, want_loss, 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace tessel::model
