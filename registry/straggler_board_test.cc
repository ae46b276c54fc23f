// StragglerBoard: only servers report, bad entries are dropped, one entry
// per (job, rank) with the highest score, lapsed leases forgotten.
#include "registry/straggler_board.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

v1::Straggler S(const std::string& job, int rank, double score, int shard = 0) {
  v1::Straggler s;
  s.set_job(job);
  s.set_rank(rank);
  s.set_registry_rank(rank);
  s.set_score(score);
  s.set_lateness_seconds(0.5);
  s.set_shard(shard);
  return s;
}

TEST(StragglerBoardTest, OnlyServersReport) {
  StragglerBoard board;
  EXPECT_FALSE(board.Report(7, {S("a", 1, 3.0)})) << "a worker's lease";
  EXPECT_TRUE(board.All().empty());
  board.ServerJoined(7);
  EXPECT_TRUE(board.Report(7, {S("a", 1, 3.0)}));
  ASSERT_EQ(board.ForJob("a").size(), 1u);
  EXPECT_TRUE(board.ForJob("b").empty());
  EXPECT_TRUE(board.Report(7, {})) << "an empty list: none any more";
  EXPECT_TRUE(board.All().empty());
}

TEST(StragglerBoardTest, OneEntryPerRankWithTheHighestScore) {
  StragglerBoard board;
  board.ServerJoined(1);
  board.ServerJoined(2);
  board.Report(1, {S("a", 2, 2.0, 0), S("b", 0, 1.7, 0)});
  board.Report(2, {S("a", 2, 3.1, 1), S("a", 1, 1.6, 1)});
  const std::vector<v1::Straggler> a = board.ForJob("a");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].rank(), 1);
  EXPECT_EQ(a[1].rank(), 2);
  EXPECT_EQ(a[1].score(), 3.1);
  EXPECT_EQ(a[1].shard(), 1);
  EXPECT_EQ(board.All().size(), 3u);
  board.Retain({1});  // server 2's lease lapsed
  ASSERT_EQ(board.ForJob("a").size(), 1u);
  EXPECT_EQ(board.ForJob("a")[0].score(), 2.0);
  board.Forget(1);
  EXPECT_TRUE(board.All().empty());
  EXPECT_FALSE(board.Report(1, {S("a", 2, 2.0)})) << "a forgotten lease is no server";
}

TEST(StragglerBoardTest, BadEntriesAreDroppedAndTheListBounded) {
  StragglerBoard board;
  board.ServerJoined(1);
  std::vector<v1::Straggler> bad = {
      S("", 0, 2.0), S("a", -1, 2.0), S("a", 0, std::numeric_limits<double>::quiet_NaN()),
      S(std::string(StragglerBoard::kMaxJobNameBytes + 1, 'j'), 0, 2), S("ok", 3, 2.0)};
  bad[1].set_rank(-1);
  EXPECT_FALSE(board.Report(1, bad));
  ASSERT_EQ(board.All().size(), 1u);
  EXPECT_EQ(board.All()[0].job(), "ok");
  std::vector<v1::Straggler> many;
  for (int r = 0; r < 1000; ++r) many.push_back(S("big", r, 2.0));
  EXPECT_FALSE(board.Report(1, many));
  EXPECT_EQ(board.ForJob("big").size(), StragglerBoard::kMaxPerServer);
}

}  // namespace
}  // namespace tessel
