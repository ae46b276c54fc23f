#include "core/checkpoint_manifest.h"

#include <random>

#include "gtest/gtest.h"

namespace tessel {
namespace {

Manifest Sample(int shards, int64_t params) {
  Manifest m;
  m.job = "job";
  m.step = 12;
  m.epoch = 3;
  m.num_shards = shards;
  m.num_params = params;
  m.state_slots = 2;
  m.spec_json = R"({"job":"job"})";
  m.created_unix_ms = 1700000000000;
  std::vector<int64_t> b = SplitAligned(params, shards, 4);
  for (int s = 0; s < shards; ++s) {
    ShardEntry e;
    e.shard = s;
    e.file = ShardFileName(s);
    e.range_begin = b[s];
    e.range_end = b[s + 1];
    e.state_slots = 2;
    e.bytes = 3 * (b[s + 1] - b[s]) * 4;
    e.xxh64 = Xxh64Hex("x", 1);
    m.shards.push_back(e);
  }
  return m;
}

TEST(CheckpointManifestTest, RoundTrips) {
  Manifest m = Sample(3, 1001);
  auto back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job, "job");
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->epoch, 3);
  ASSERT_EQ(back->shards.size(), 3u);
  EXPECT_EQ(back->shards[2].range_end, 1001);
  EXPECT_EQ(back->shards[1].xxh64, m.shards[1].xxh64);
  auto entry = ParseShardEntry(ShardEntryToJson(m.shards[1]));
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->range_begin, m.shards[1].range_begin);
  EXPECT_EQ(CheckpointDir("job", 12), "job/step-0000000012");
  EXPECT_EQ(Xxh64Hex("", 0), "ef46db3751d8e999");  // XXH64 of the empty string
}

// Per-tensor skips (tensors left without an update) are written only when
// some tensor was skipped, and each count must lie in [0, step].
TEST(CheckpointManifestTest, TensorSkipsRoundTripWhenPresent) {
  Manifest m = Sample(2, 100);
  EXPECT_EQ(ManifestToJson(m).find("tensor_skips"), std::string::npos);
  m.tensor_skips = {0, 3, 12};
  auto back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensor_skips, m.tensor_skips);
  m.tensor_skips = {0, 13};  // more skips than steps
  EXPECT_EQ(ParseManifest(ManifestToJson(m)).status().code(), absl::StatusCode::kInvalidArgument);
  m.tensor_skips = {-1};
  EXPECT_EQ(ParseManifest(ManifestToJson(m)).status().code(), absl::StatusCode::kInvalidArgument);
}

// The job's creator (a credential's identity) is written when known, read
// back, and absent from checkpoints written before creators were recorded.
TEST(CheckpointManifestTest, CreatorRoundTripsWhenKnown) {
  Manifest m = Sample(2, 100);
  EXPECT_EQ(ManifestToJson(m).find("creator"), std::string::npos);
  auto back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->creator, "");
  m.creator = "token sha256:00112233445566778899aabbccddeeff";
  back = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->creator, m.creator);
  std::string text = ManifestToJson(m);
  text.replace(text.find("\"token sha256"), 47, "17");  // not a string
  EXPECT_EQ(ParseManifest(text).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointManifestTest, RejectsInconsistentManifests) {
  EXPECT_FALSE(ParseManifest("not json").ok());
  EXPECT_FALSE(ParseManifest("[]").ok());
  auto mutate = [](auto f) {
    Manifest m = Sample(2, 100);
    f(m);
    return ParseManifest(ManifestToJson(m)).status();
  };
  EXPECT_FALSE(mutate([](Manifest& m) { m.shards.pop_back(); }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.shards[1].range_begin += 4; }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.num_params = 99; }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.shards[0].file = "../../etc/passwd"; }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.shards[0].bytes += 1; }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.shards[0].xxh64 = "zz"; }).ok());
  EXPECT_FALSE(mutate([](Manifest& m) { m.step = -1; }).ok());
  std::string text = ManifestToJson(Sample(2, 100));
  text.replace(text.find("\"version\": 1"), 12, "\"version\": 9");
  EXPECT_NE(ParseManifest(text).status().message().find("version 9"), std::string::npos);
}

// Property: for random old and new shard counts, the plans for the new ranges
// tile the flat vector exactly, each piece inside its old shard.
TEST(CheckpointManifestTest, ReslicePlansTileEveryNewRange) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t params = 1 + rng() % 5000;
    Manifest m = Sample(1 + rng() % 6, params);
    const int new_shards = 1 + rng() % 7;
    std::vector<int64_t> b = SplitAligned(params, new_shards, 1 + rng() % 16);
    std::vector<int> owner(params, -1);
    for (int s = 0; s < new_shards; ++s) {
      Range r{b[s], b[s + 1]};
      int64_t covered = 0;
      for (const Piece& p : ReslicePlan(m, r)) {
        EXPECT_EQ(p.dst_offset, covered);
        const ShardEntry& e = m.shards[p.old_shard];
        EXPECT_LE(p.src_offset + p.count, e.range_end - e.range_begin);
        for (int64_t i = 0; i < p.count; ++i) {
          EXPECT_EQ(e.range_begin + p.src_offset + i, r.begin + p.dst_offset + i);
          owner[r.begin + p.dst_offset + i] = s;
        }
        covered += p.count;
      }
      EXPECT_EQ(covered, r.size());
    }
    for (int64_t i = 0; i < params; ++i) ASSERT_GE(owner[i], 0);
  }
}

}  // namespace
}  // namespace tessel
