#include "core/straggler.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

// Steps [first, first + n) of a job whose rank r computes compute_us[r]
// after the previous step ended and then pushes; the step ends 1 ms after
// the last push. `slow(step)` may stretch rank `who`'s compute.
std::vector<StepArrivals> Simulate(int64_t first, int n, std::vector<int64_t> compute_us,
                                   int who = -1, double factor = 1.0,
                                   const std::vector<int>& slow_steps = {}, uint32_t seed = 1,
                                   int64_t jitter_us = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> jitter(0, jitter_us);
  std::vector<StepArrivals> out;
  int64_t end = 1'000'000;
  StepArrivals warm;
  warm.step = first - 1;
  warm.end_us = end;
  warm.first_push_us.assign(compute_us.size(), end - 10);
  warm.last_push_us.assign(compute_us.size(), end - 10);
  out.push_back(warm);
  for (int i = 0; i < n; ++i) {
    const int64_t step = first + i;
    bool slow = slow_steps.empty();
    for (int s : slow_steps) slow = slow || s == step;
    StepArrivals a;
    a.step = step;
    int64_t last = 0;
    for (size_t r = 0; r < compute_us.size(); ++r) {
      int64_t c = compute_us[r] + jitter(rng);
      if (static_cast<int>(r) == who && slow) c = static_cast<int64_t>(c * factor);
      a.first_push_us.push_back(end + c - 50);
      a.last_push_us.push_back(end + c);
      last = std::max(last, end + c);
    }
    a.end_us = last + 1000;
    end = a.end_us;
    out.push_back(a);
  }
  return out;
}

TEST(ScoreRanks, ASlowRankScoresItsSlowdown) {
  const auto w = Simulate(10, 8, {100'000, 100'000, 100'000, 100'000}, /*who=*/2, /*factor=*/3.0);
  const std::vector<RankScore> s = ScoreRanks(w, StragglerRule{});
  ASSERT_EQ(s.size(), 4u);
  EXPECT_NEAR(s[2].score, 3.0, 1e-9);
  EXPECT_NEAR(s[2].lateness_s, 0.2, 1e-9);
  EXPECT_NEAR(s[2].time_s, 0.3, 1e-9);
  EXPECT_EQ(s[2].steps, 8);
  for (int r : {0, 1, 3}) {
    EXPECT_NEAR(s[r].score, 1.0, 1e-9) << r;
    EXPECT_EQ(s[r].lateness_s, 0) << r;
  }
}

TEST(ScoreRanks, TooFewStepsOrOneRankScoresNobody) {
  EXPECT_TRUE(ScoreRanks(Simulate(1, 4, {10, 10}, 1, 3.0), StragglerRule{}).empty());
  EXPECT_TRUE(ScoreRanks(Simulate(1, 8, {10}), StragglerRule{}).empty());
  EXPECT_TRUE(ScoreRanks({}, StragglerRule{}).empty());
}

TEST(ScoreRanks, StepsWithoutTheirPredecessorOrUnfinishedDoNotCount) {
  std::vector<StepArrivals> w = Simulate(1, 8, {100'000, 100'000}, 1, 3.0);
  w[4].step += 100;      // a gap: steps 4 and 5 (whose predecessor is "104") drop out
  w.back().end_us = -1;  // in progress
  const std::vector<RankScore> s = ScoreRanks(w, StragglerRule{});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].steps, 5);
  StragglerRule rule;
  rule.min_steps = 6;
  EXPECT_TRUE(ScoreRanks(w, rule).empty());
}

TEST(ScoreRanks, OnlyTheNewestWindowCounts) {
  // 8 slow steps then 8 normal ones: the window (8) sees only the normal.
  std::vector<StepArrivals> w =
      Simulate(1, 16, {100'000, 100'000, 100'000}, 0, 3.0, {1, 2, 3, 4, 5, 6, 7, 8});
  const std::vector<RankScore> s = ScoreRanks(w, StragglerRule{});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_NEAR(s[0].score, 1.0, 1e-9);
}

TEST(StragglerSet, NamedAfterMostOfTheWindowAndWithHysteresis) {
  const StragglerRule rule;
  StragglerSet set;
  // One slow step in eight: nobody.
  auto changes = set.Update(
      ScoreRanks(Simulate(1, 8, {100'000, 100'000, 100'000, 100'000}, 3, 3.0, {5}), rule), rule);
  EXPECT_TRUE(changes.empty());
  // Five slow steps of the last eight: rank 3 is named.
  changes = set.Update(
      ScoreRanks(Simulate(1, 8, {100'000, 100'000, 100'000, 100'000}, 3, 3.0, {4, 5, 6, 7, 8}),
                 rule),
      rule);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].started);
  EXPECT_EQ(changes[0].score.rank, 3);
  EXPECT_EQ(set.named().count(3), 1u);
  // 1.3x: below enter, above leave: still named, no change.
  changes = set.Update(
      ScoreRanks(Simulate(1, 8, {100'000, 100'000, 100'000, 100'000}, 3, 1.3), rule), rule);
  EXPECT_TRUE(changes.empty());
  EXPECT_NEAR(set.named().at(3).score, 1.3, 1e-9);
  // Empty scores (too few steps): no change.
  EXPECT_TRUE(set.Update({}, rule).empty());
  // Back to the median's pace: it ends.
  changes =
      set.Update(ScoreRanks(Simulate(1, 8, {100'000, 100'000, 100'000, 100'000}), rule), rule);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].started);
  EXPECT_EQ(changes[0].score.rank, 3);
  EXPECT_TRUE(set.named().empty());
}

TEST(StragglerSet, AFastJobsJitterNamesNobody) {
  // 1 ms steps, one rank 3x slower: below the lateness floor (20 ms).
  const StragglerRule rule;
  StragglerSet set;
  EXPECT_TRUE(
      set.Update(ScoreRanks(Simulate(1, 8, {1000, 1000, 1000, 1000}, 0, 3.0), rule), rule).empty());
}

TEST(StragglerSet, RandomFaultFreeRunsNameNobody) {
  // Property: ranks with equal work and up to 20% jitter are never named.
  const StragglerRule rule;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    StragglerSet set;
    const auto w = Simulate(1, 40, {100'000, 100'000, 100'000, 100'000, 100'000, 100'000}, -1, 1.0,
                            {}, seed, 20'000);
    for (size_t end = 2; end <= w.size(); ++end) {
      const auto scores = ScoreRanks(absl::MakeConstSpan(w.data(), end), rule);
      ASSERT_TRUE(set.Update(scores, rule).empty()) << "seed " << seed << " end " << end;
    }
  }
}

TEST(StragglerSet, ARankTheJobNoLongerHasEnds) {
  const StragglerRule rule;
  StragglerSet set;
  ASSERT_EQ(set.Update(ScoreRanks(Simulate(1, 8, {100'000, 100'000, 100'000}, 2, 3.0), rule), rule)
                .size(),
            1u);
  const auto changes = set.Update(ScoreRanks(Simulate(1, 8, {100'000, 100'000}), rule), rule);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].started);
  EXPECT_EQ(changes[0].score.rank, 2);
}

}  // namespace
}  // namespace tessel
