#include "core/layout.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(LayoutTest, PacksTensorsInOrderAndStraddlesShards) {
  auto layout = Layout::Create({{"a", {3, 5}}, {"b", {7}}, {"c", {2, 2, 2}}}, 2, 4, 8);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_params(), 30);
  EXPECT_EQ(layout->tensors()[1].offset, 15);
  EXPECT_EQ(layout->tensors()[2].offset, 22);
  // 30 elements = 8 units of 4 (the last partial): 4 units each.
  EXPECT_EQ(layout->shard_range(0), (Range{0, 16}));
  EXPECT_EQ(layout->shard_range(1), (Range{16, 30}));
  // Tensor b [15, 22) straddles the boundary at 16.
  EXPECT_EQ(layout->ShardOf(15), 0);
  EXPECT_EQ(layout->ShardOf(16), 1);
  EXPECT_EQ(layout->num_buckets(1), 2);
  EXPECT_EQ(layout->bucket_range(1, 1), (Range{24, 30}));
  EXPECT_EQ(layout->FindTensor("c"), 2);
  EXPECT_EQ(layout->FindTensor("zzz"), -1);
}

TEST(LayoutTest, RangesOverlapWhenAnElementIsShared) {
  EXPECT_TRUE((Range{0, 10}).Overlaps(Range{9, 12}));
  EXPECT_FALSE((Range{0, 10}).Overlaps(Range{10, 12}));
  EXPECT_FALSE((Range{5, 10}).Overlaps(Range{0, 5}));
  EXPECT_EQ((TensorSlot{"t", {3, 4}, 7, 12}).range(), (Range{7, 19}));
}

TEST(LayoutTest, JobNamesAreSafeForFoldersAndGroups) {
  for (const char* ok : {"a", "mlp-1", "exact.g1", "J~sync16.e5", "A_b.c-d", "7"}) {
    EXPECT_TRUE(ValidateJobName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "a/b", "../x", ".hidden", "-x", "~x", "a b", "a\n", "a:b"}) {
    EXPECT_EQ(ValidateJobName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(ValidateJobName(std::string(129, 'x')).ok());
  EXPECT_TRUE(ValidateJobName(std::string(128, 'x')).ok());
}

TEST(LayoutTest, MoreShardsThanUnitsLeavesTrailingShardsEmpty) {
  auto layout = Layout::Create({{"w", {5}}}, 4, 4, 4);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->shard_range(0), (Range{0, 4}));
  EXPECT_EQ(layout->shard_range(1), (Range{4, 5}));
  EXPECT_EQ(layout->shard_range(2), (Range{5, 5}));
  EXPECT_EQ(layout->shard_range(3), (Range{5, 5}));
  EXPECT_FALSE(layout->shard_empty(0));
  EXPECT_TRUE(layout->shard_empty(2));
  EXPECT_EQ(layout->num_buckets(2), 0);
  EXPECT_EQ(layout->ShardOf(0), 0);
  EXPECT_EQ(layout->ShardOf(4), 1);
}

// Shard 0 holds elements whatever the job's size and the shard count: it
// writes the manifest and answers for the job's step.
TEST(LayoutTest, ShardZeroIsNeverEmpty) {
  for (int64_t n = 1; n <= 300; n += 7) {
    for (int shards = 1; shards <= 9; ++shards) {
      auto layout = Layout::Create({{"w", {n}}}, shards, 64, 64);
      ASSERT_TRUE(layout.ok());
      EXPECT_FALSE(layout->shard_empty(0)) << n << " elements, " << shards << " shards";
      int64_t lo = n, hi = 0;
      for (int s = 0; s < shards; ++s) {
        if (layout->shard_empty(s)) {
          for (int t = s; t < shards; ++t) EXPECT_TRUE(layout->shard_empty(t));  // trailing only
          break;
        }
        lo = std::min(lo, layout->shard_range(s).size());
        hi = std::max(hi, layout->shard_range(s).size());
      }
      EXPECT_LE(hi - lo, 64);
    }
  }
}

TEST(LayoutTest, CutPointsSplitBucketsSoEachLiesInOneUnit) {
  // Units start at 0, 10, 23; one shard, buckets of 8.
  auto layout = Layout::Create({{"a", {10}}, {"b", {13}}, {"c", {9}}}, 2, 4, 8, {10, 23});
  ASSERT_TRUE(layout.ok()) << layout.status();
  // Shard 0 = [0, 16): buckets [0,8) [8,10) [10,16); shard 1 = [16, 32): [16,23) [23,31) [31,32).
  EXPECT_EQ(layout->num_buckets(0), 3);
  EXPECT_EQ(layout->bucket_range(0, 1), (Range{8, 10}));
  EXPECT_EQ(layout->bucket_range(0, 2), (Range{10, 16}));
  EXPECT_EQ(layout->num_buckets(1), 3);
  EXPECT_EQ(layout->bucket_range(1, 0), (Range{16, 23}));
  EXPECT_EQ(layout->bucket_range(1, 2), (Range{31, 32}));
  EXPECT_EQ(layout->BucketOf(1, 23), 1);
  EXPECT_EQ(layout->BucketsIn(0, Range{10, 23}), (std::pair<int, int>{2, 1}));
  EXPECT_EQ(layout->BucketsIn(1, Range{10, 23}), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(layout->BucketsIn(1, Range{23, 32}), (std::pair<int, int>{1, 2}));
  EXPECT_EQ(layout->BucketsIn(0, Range{23, 32}).second, 0);
  EXPECT_FALSE(Layout::Create({{"a", {10}}}, 1, 1, 4, {11}).ok());
}

TEST(LayoutTest, RejectsBadInput) {
  EXPECT_FALSE(Layout::Create({}, 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"", {1}}}, 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {1}}, {"a", {2}}}, 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {-1}}}, 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {0}}}, 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {4}}}, 0, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {4}}}, Layout::kMaxShards + 1, 1, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {4}}}, 1, 0, 1).ok());
  EXPECT_FALSE(Layout::Create({{"a", {4}}}, 1, 4, 6).ok());
  EXPECT_FALSE(Layout::Create({{"a", {int64_t{1} << 30, int64_t{1} << 30}}}, 1, 1, 1).ok());
  auto status = Layout::Create({{"a", {2}}, {"a", {3}}}, 1, 1, 1).status();
  EXPECT_NE(status.message().find("'a' appears twice"), std::string::npos) << status;
}

// Property test: over random models and shard counts, ranges cover [0, P)
// exactly, are aligned, balanced to one unit, buckets tile each range, and the
// result is a pure function of the inputs.
TEST(LayoutTest, RandomLayoutsAreExactAlignedBalancedAndDeterministic) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<TensorDesc> tensors;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape;
      const int rank = static_cast<int>(rng() % 4);
      for (int d = 0; d < rank; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 40));
      tensors.push_back({"t" + std::to_string(i), shape});
    }
    const int shards = 1 + static_cast<int>(rng() % 9);
    const int64_t align = int64_t{1} << (rng() % 7);
    const int64_t bucket = align * (1 + static_cast<int64_t>(rng() % 8));
    std::vector<int64_t> cuts;
    int64_t total = 0;
    for (const auto& t : tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (rng() % 3 == 0) cuts.push_back(total);
      total += n;
    }
    auto layout = Layout::Create(tensors, shards, align, bucket, cuts);
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto again = Layout::Create(tensors, shards, align, bucket);

    int64_t expect_offset = 0;
    for (const TensorSlot& t : layout->tensors()) {
      EXPECT_EQ(t.offset, expect_offset);
      expect_offset += t.numel;
    }
    const int64_t p = layout->num_params();
    EXPECT_EQ(p, expect_offset);

    int64_t covered = 0, min_size = p, max_size = 0;
    for (int s = 0; s < shards; ++s) {
      Range r = layout->shard_range(s);
      EXPECT_EQ(r, again->shard_range(s));
      EXPECT_EQ(r.begin, covered);
      if (r.end != p) {
        EXPECT_EQ(r.end % align, 0);
      }
      covered = r.end;
      min_size = std::min(min_size, r.size());
      max_size = std::max(max_size, r.size());
      int64_t b_covered = r.begin;
      for (int b = 0; b < layout->num_buckets(s); ++b) {
        Range br = layout->bucket_range(s, b);
        EXPECT_EQ(br.begin, b_covered);
        EXPECT_GT(br.size(), 0);
        EXPECT_LE(br.size(), bucket);
        for (int64_t c : cuts) EXPECT_FALSE(c > br.begin && c < br.end) << "bucket crosses a cut";
        EXPECT_EQ(layout->BucketOf(s, br.begin), b);
        EXPECT_EQ(layout->BucketOf(s, br.end - 1), b);
        b_covered = br.end;
      }
      EXPECT_EQ(b_covered, r.end);
      for (int64_t i = r.begin; i < r.end; i += 1 + (r.size() / 3)) {
        EXPECT_EQ(layout->ShardOf(i), s);
      }
    }
    EXPECT_EQ(covered, p);
    EXPECT_LE(max_size - min_size, align);
  }
}

}  // namespace
}  // namespace tessel
