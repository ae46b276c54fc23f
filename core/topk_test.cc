#include "core/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(TopkTest, CountIsTheCeilingClampedToTheBucket) {
  EXPECT_EQ(TopkCount(0, 100), 0);
  EXPECT_EQ(TopkCount(-1, 100), 0);
  EXPECT_EQ(TopkCount(0.01, 100), 1);
  EXPECT_EQ(TopkCount(0.011, 100), 2);
  EXPECT_EQ(TopkCount(1e-9, 100), 1);
  EXPECT_EQ(TopkCount(1.0, 100), 100);
  EXPECT_EQ(TopkCount(0.5, 0), 0);
}

// The largest magnitudes go (indices rising, ties to the lower index); what
// does not go stays in the residual, so sent + residual == gradient + old
// residual, element by element (error feedback loses nothing).
TEST(TopkTest, SendsTheLargestAndKeepsTheRestForNextTime) {
  const std::vector<float> grad = {0.1f, -5.f, 2.f, 0.f, -2.f, 3.f, 0.5f, -0.25f};
  std::vector<float> residual = {0.f, 0.f, 0.f, 4.f, 0.f, 0.f, 0.f, 0.f};
  const int64_t n = static_cast<int64_t>(grad.size());
  const int64_t k = 3;
  std::vector<uint8_t> wire(SparseBytes(k));
  std::vector<float> before = residual;
  TopkCompress(grad.data(), residual.data(), n, k, wire.data());
  ASSERT_TRUE(CheckSparse(wire.data(), k, n).ok());
  std::vector<float> sent(grad.size());
  Densify(wire.data(), k, sent.data(), n);
  // |g + r| = 0.1 5 2 4 2 3 0.5 0.25: the three largest are 1 (-5), 3 (4), 5 (3).
  EXPECT_EQ(sent, (std::vector<float>{0, -5, 0, 4, 0, 3, 0, 0}));
  for (size_t i = 0; i < grad.size(); ++i) {
    EXPECT_EQ(sent[i] + residual[i], grad[i] + before[i]) << i;
  }
  // A tie at the cut (2 and -2 at indices 2 and 4): the lower index goes.
  std::vector<float> r2(grad.size(), 0.f);
  TopkCompress(grad.data(), r2.data(), n, 3, wire.data());
  Densify(wire.data(), 3, sent.data(), n);
  EXPECT_EQ(sent, (std::vector<float>{0, -5, 2, 0, 0, 3, 0, 0}));
}

TEST(TopkTest, OverStepsEveryGradientIsEventuallySent) {
  // One element per step out of four: after any number of steps of the
  // same gradient, the sum sent plus what is held back is the sum of the
  // gradients, and even the smallest entry has been sent once it grew.
  const std::vector<float> grad = {1.f, 0.5f, 0.25f, 0.125f};
  std::vector<float> residual(4, 0.f), total(4, 0.f), sent(4);
  std::vector<uint8_t> wire(SparseBytes(1));
  constexpr int kSteps = 32;
  for (int step = 0; step < kSteps; ++step) {
    TopkCompress(grad.data(), residual.data(), 4, 1, wire.data());
    Densify(wire.data(), 1, sent.data(), 4);
    for (int i = 0; i < 4; ++i) total[i] += sent[i];
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(total[i] + residual[i], kSteps * grad[i]) << i;
    EXPECT_GT(total[i], 0.f) << i << ": small entries go once they have grown";
  }
}

TEST(TopkTest, NanRanksAboveInfinityAndZerosTie) {
  // A float comparison with NaN is not an order; the bits of |v| are: NaN
  // first, then infinities, and -0 ties +0 (the lower index wins).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> grad = {0.f, -inf, 1.f, nan, -0.f, 2.f, 0.f};
  std::vector<float> residual(grad.size(), 0.f);
  std::vector<uint8_t> wire(SparseBytes(4));
  TopkCompress(grad.data(), residual.data(), 7, 4, wire.data());
  uint32_t idx[4];
  std::memcpy(idx, wire.data(), sizeof(idx));
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 4), (std::vector<uint32_t>{1, 2, 3, 5}));
  EXPECT_EQ(TopkKey(-0.f), TopkKey(0.f));
  EXPECT_GT(TopkKey(nan), TopkKey(inf));
  // k = 5: the fifth is the lowest-index zero.
  std::fill(residual.begin(), residual.end(), 0.f);
  wire.assign(SparseBytes(5), 0);
  TopkCompress(grad.data(), residual.data(), 7, 5, wire.data());
  uint32_t idx5[5];
  std::memcpy(idx5, wire.data(), sizeof(idx5));
  EXPECT_EQ(std::vector<uint32_t>(idx5, idx5 + 5), (std::vector<uint32_t>{0, 1, 2, 3, 5}));
}

// The definition, by sorting: the k entries of largest TopkKey (ties: the
// lower index), indices rising. TopkCompress's radix select must agree.
void ReferenceTopk(const float* grad, float* residual, int64_t n, int64_t k, uint8_t* wire) {
  std::vector<uint32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    order[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return TopkKey(residual[a]) > TopkKey(residual[b]);
  });
  order.resize(static_cast<size_t>(k));
  std::sort(order.begin(), order.end());
  for (int64_t j = 0; j < k; ++j) {
    const uint32_t i = order[static_cast<size_t>(j)];
    std::memcpy(wire + 4 * j, &i, 4);
    std::memcpy(wire + 4 * k + 4 * j, &residual[i], 4);
    residual[i] = 0.f;
  }
}

TEST(TopkTest, RadixSelectAgreesWithSorting) {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 2, 7, 100, 4097, 300000}) {
    for (int trial = 0; trial < 4; ++trial) {
      // Trial 0: spread values; 1: few distinct magnitudes (ties at the
      // cut); 2: one magnitude (every entry ties); 3: tiny and huge, NaN.
      std::vector<float> grad(static_cast<size_t>(n));
      std::normal_distribution<float> normal(0.f, 1.f);
      for (auto& g : grad) {
        const float x = normal(rng);
        g = trial == 0 ? x : trial == 1 ? std::round(x * 4) / 4 : trial == 2 ? 0.5f : x * 1e-30f;
      }
      if (trial == 3 && n > 10) {
        grad[3] = nan;
        grad[7] = -std::numeric_limits<float>::infinity();
        grad[static_cast<size_t>(n) - 1] = 1e30f;
      }
      for (int64_t k : {int64_t{1}, (n + 99) / 100, n / 2, n}) {
        if (k < 1) continue;
        SCOPED_TRACE(testing::Message() << "n=" << n << " trial=" << trial << " k=" << k);
        std::vector<float> r1(grad.size(), 0.125f), r2(grad.size(), 0.125f);
        std::vector<uint8_t> w1(SparseBytes(k)), w2(SparseBytes(k));
        for (int step = 0; step < 2; ++step) {
          TopkCompress(grad.data(), r1.data(), n, k, w1.data());
          ReferenceTopk(grad.data(), r2.data(), n, k, w2.data());
          ASSERT_EQ(w1, w2);
          ASSERT_EQ(0, std::memcmp(r1.data(), r2.data(), r1.size() * 4));
        }
      }
    }
  }
}

TEST(TopkTest, MalformedIndicesAreRefused) {
  std::vector<uint8_t> wire(SparseBytes(3));
  auto set = [&](uint32_t a, uint32_t b, uint32_t c) {
    uint32_t idx[3] = {a, b, c};
    std::memcpy(wire.data(), idx, sizeof(idx));
  };
  set(0, 5, 9);
  EXPECT_TRUE(CheckSparse(wire.data(), 3, 10).ok());
  set(0, 5, 10);
  EXPECT_EQ(CheckSparse(wire.data(), 3, 10).code(), absl::StatusCode::kInvalidArgument);
  set(5, 5, 9);
  EXPECT_EQ(CheckSparse(wire.data(), 3, 10).code(), absl::StatusCode::kInvalidArgument);
  set(6, 5, 9);
  EXPECT_NE(CheckSparse(wire.data(), 3, 10).message().find("rise"), std::string::npos);
}

}  // namespace
}  // namespace tessel
