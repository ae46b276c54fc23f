#include "core/early_stopping.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(EarlyStoppingTest, StopsAfterPatienceValuesWithoutImprovement) {
  EarlyStopping s({.patience = 3, .min_delta = 0.0});
  EXPECT_TRUE(s.Observe(1.0));
  EXPECT_TRUE(s.Observe(0.9));
  EXPECT_FALSE(s.Observe(0.95));
  EXPECT_FALSE(s.Observe(0.9));  // equal is not better
  EXPECT_FALSE(s.ShouldStop());
  EXPECT_FALSE(s.Observe(1.2));
  EXPECT_TRUE(s.ShouldStop());
  EXPECT_EQ(*s.best(), 0.9);
  EXPECT_TRUE(s.Observe(0.1));  // stays stopped once decided
  EXPECT_TRUE(s.ShouldStop());
}

TEST(EarlyStoppingTest, MinDeltaAndMaxMode) {
  EarlyStopping s({.patience = 2, .min_delta = 0.1, .mode = EarlyStoppingPolicy::Mode::kMax});
  EXPECT_TRUE(s.Observe(0.5));
  EXPECT_FALSE(s.Observe(0.55));  // within min_delta
  EXPECT_TRUE(s.Observe(0.7));
  EXPECT_FALSE(s.Observe(0.75));
  EXPECT_FALSE(s.ShouldStop());
  EXPECT_FALSE(s.Observe(0.79));
  EXPECT_TRUE(s.ShouldStop());
}

TEST(EarlyStoppingTest, NanNeverImproves) {
  EarlyStopping s({.patience = 2});
  EXPECT_FALSE(s.Observe(std::nan("")));
  EXPECT_FALSE(s.best().has_value());
  EXPECT_FALSE(s.Observe(std::nan("")));
  EXPECT_TRUE(s.ShouldStop());
}

// Property: two instances fed the same sequence agree at every point, and the
// decision matches a direct recount.
TEST(EarlyStoppingTest, DeterministicOverRandomSequences) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int patience = 1 + trial % 6;
    EarlyStopping a({.patience = patience, .min_delta = 0.01}),
        b({.patience = patience, .min_delta = 0.01});
    double best = 1e300;
    int since = 0;
    bool stop = false;
    for (int i = 0; i < 50; ++i) {
      const double v = u(rng);
      a.Observe(v);
      b.Observe(v);
      if (v < best - 0.01 || i == 0) {
        best = v;
        since = 0;
      } else {
        ++since;
      }
      stop = stop || since >= patience;
      ASSERT_EQ(a.ShouldStop(), b.ShouldStop());
      ASSERT_EQ(a.ShouldStop(), stop) << "trial " << trial << " i " << i;
    }
  }
}

}  // namespace
}  // namespace tessel
