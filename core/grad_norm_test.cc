#include "core/grad_norm.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/reduce.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(GradNormTest, TheHeldSumIsTheReductionsSumAndTheStatsTheUpdatesGradient) {
  const size_t n = 10007;  // several blocks and a ragged end
  const int w = 3;
  std::vector<std::vector<float>> ranks;
  for (int r = 0; r < w; ++r) ranks.push_back(Random(n, 11 + r));
  const float* srcs[] = {ranks[0].data(), ranks[1].data(), ranks[2].data()};
  for (float scale : {1.0f, 0.0625f, 0.3f}) {
    std::vector<float> held(n);
    const GradNormStats s = ReduceSumWithNorm(srcs, w, held.data(), n, w, scale);
    std::vector<float> sum(n);
    ReduceSum(srcs, w, sum.data(), n);
    EXPECT_TRUE(SameBits(held, sum)) << "the held buffer is ReduceSum's";
    // Read back as the update's only source, the mean has the full reduction's bits.
    std::vector<float> mean_all(n), mean_held(n);
    ReduceMean(srcs, w, mean_all.data(), n, w);
    const float* one[] = {held.data()};
    ReduceMean(one, 1, mean_held.data(), n, w);
    EXPECT_TRUE(SameBits(mean_all, mean_held));
    double sq = 0, ab = 0, mx = 0;
    for (size_t i = 0; i < n; ++i) {
      float g = mean_all[i];
      if (scale != 1.0f) g = g * scale;
      sq += double{g} * g;
      ab += std::fabs(double{g});
      mx = std::max(mx, std::fabs(double{g}));
    }
    EXPECT_NEAR(s.sum_sq, sq, 1e-6 * sq);
    EXPECT_NEAR(s.sum_abs, ab, 1e-6 * ab);
    EXPECT_EQ(s.max_abs, mx);
    EXPECT_NEAR(NormOf(s, 2.0), std::sqrt(sq), 1e-6 * std::sqrt(sq));
    EXPECT_EQ(NormOf(s, std::numeric_limits<double>::infinity()), mx);
    EXPECT_NEAR(NormOf(s, 1.0), ab, 1e-6 * ab);
  }
}

TEST(GradNormTest, SharesAddUpToTheWhole) {
  const size_t n = 9000;
  std::vector<float> g = Random(n, 5);
  const float* all[] = {g.data()};
  std::vector<float> out(n);
  const GradNormStats whole = ReduceSumWithNorm(all, 1, out.data(), n, 1, 1.0f);
  GradNormStats parts;
  for (size_t begin : {size_t{0}, size_t{3000}, size_t{6000}}) {
    const float* part[] = {g.data() + begin};
    parts.Add(ReduceSumWithNorm(part, 1, out.data() + begin, 3000, 1, 1.0f));
  }
  EXPECT_NEAR(parts.sum_sq, whole.sum_sq, 1e-6 * whole.sum_sq);
  EXPECT_EQ(parts.max_abs, whole.max_abs);
}

TEST(GradNormTest, AnOverflowShowsInTheNorm) {
  std::vector<float> g(100, 1.0f);
  g[42] = std::numeric_limits<float>::quiet_NaN();
  const float* srcs[] = {g.data()};
  std::vector<float> out(100);
  GradNormStats s = ReduceSumWithNorm(srcs, 1, out.data(), 100, 1, 1.0f);
  EXPECT_TRUE(std::isnan(NormOf(s, 2.0)));
  EXPECT_TRUE(std::isnan(NormOf(s, std::numeric_limits<double>::infinity())));
  GradNormStats fine;
  fine.max_abs = 3;
  fine.Add(s);
  EXPECT_TRUE(std::isnan(fine.max_abs)) << "NaN wins whichever side it is on";
  g[42] = std::numeric_limits<float>::infinity();
  s = ReduceSumWithNorm(srcs, 1, out.data(), 100, 1, 1.0f);
  EXPECT_TRUE(std::isinf(NormOf(s, 2.0)));
}

TEST(GradNormTest, OnlyTheNormTypesTorchScriptsUse) {
  EXPECT_TRUE(IsSupportedNormType(2.0));
  EXPECT_TRUE(IsSupportedNormType(1.0));
  EXPECT_TRUE(IsSupportedNormType(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(IsSupportedNormType(3.0));
  EXPECT_FALSE(IsSupportedNormType(0.0));
}

}  // namespace
}  // namespace tessel
