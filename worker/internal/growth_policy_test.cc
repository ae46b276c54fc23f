// The growth policy over every small configuration: the boundary rule against
// its definition, and the agreement against a brute-force intersection of
// every possible set of proposals.
#include "worker/internal/growth_policy.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace tessel::internal {
namespace {

TEST(GrowthSlotsTest, EveryConfiguration) {
  for (int max_workers = 0; max_workers <= 12; ++max_workers) {
    for (int world = 1; world <= 12; ++world) {
      for (int64_t every = -1; every <= 5; ++every) {
        for (int64_t step = 0; step <= 20; ++step) {
          const int slots = GrowthSlots(max_workers, world, every, step);
          const bool boundary = every > 0 && step % every == 0;
          const int room = max_workers - world;
          SCOPED_TRACE(testing::Message() << "max " << max_workers << " world " << world
                                          << " every " << every << " step " << step);
          if (!boundary || room <= 0) {
            EXPECT_EQ(slots, 0);
          } else {
            EXPECT_EQ(slots, std::min(room, kMaxNewcomersPerBoundary));
          }
        }
      }
    }
  }
}

TEST(GrowthProposalTest, FirstSeenPadded) {
  EXPECT_EQ(GrowthProposal({}, 0), std::vector<uint64_t>());
  EXPECT_EQ(GrowthProposal({4, 7}, 0), std::vector<uint64_t>());
  EXPECT_EQ(GrowthProposal({}, 2), std::vector<uint64_t>({kNoNewcomer, kNoNewcomer}));
  EXPECT_EQ(GrowthProposal({4}, 3), std::vector<uint64_t>({4, kNoNewcomer, kNoNewcomer}));
  EXPECT_EQ(GrowthProposal({4, 7, 9}, 2), std::vector<uint64_t>({4, 7}));
}

// Every rank's proposal drawn from {none, 3, 4, 5} per slot, for every world
// of 1..3 ranks and 1..2 slots: 4^(slots * world) cases each.
TEST(AgreedNewcomersTest, AgainstBruteForce) {
  const uint64_t values[] = {kNoNewcomer, 3, 4, 5};
  for (int world = 1; world <= 3; ++world) {
    for (int slots = 1; slots <= 2; ++slots) {
      const int words = world * slots;
      int cases = 1;
      for (int i = 0; i < words; ++i) cases *= 4;
      for (int c = 0; c < cases; ++c) {
        std::vector<uint64_t> all(static_cast<size_t>(words));
        for (int i = 0, x = c; i < words; ++i, x /= 4) all[static_cast<size_t>(i)] = values[x % 4];
        std::vector<int> expect;
        for (int i = 0; i < slots; ++i) {
          const uint64_t id = all[static_cast<size_t>(i)];
          if (id == kNoNewcomer) continue;
          bool everyone = true;
          for (int r = 1; r < world; ++r) {
            std::set<uint64_t> theirs(all.begin() + r * slots, all.begin() + (r + 1) * slots);
            everyone = everyone && theirs.count(id) > 0;
          }
          if (everyone) expect.push_back(static_cast<int>(id));
        }
        const std::vector<int> got = AgreedNewcomers(all, world, slots);
        EXPECT_EQ(got, expect) << "world " << world << " slots " << slots << " case " << c;
        // What is agreed is rank 0's, in its order, and no padding.
        for (int id : got) EXPECT_NE(static_cast<uint64_t>(id), kNoNewcomer);
      }
    }
  }
}

TEST(AgreedNewcomersTest, ProposalsOfTheSameViewAgreeOnIt) {
  const std::vector<int> seen = {2, 6, 9};
  for (int world = 1; world <= 4; ++world) {
    for (int slots = 1; slots <= kMaxNewcomersPerBoundary; ++slots) {
      std::vector<uint64_t> all;
      for (int r = 0; r < world; ++r) {
        const std::vector<uint64_t> mine = GrowthProposal(seen, slots);
        all.insert(all.end(), mine.begin(), mine.end());
      }
      const std::vector<int> want(seen.begin(),
                                  seen.begin() + std::min<size_t>(seen.size(), slots));
      EXPECT_EQ(AgreedNewcomers(all, world, slots), want);
    }
  }
}

}  // namespace
}  // namespace tessel::internal
