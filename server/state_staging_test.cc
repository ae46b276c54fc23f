// StateStaging: chunks in any order and overlapping cover the range once; a
// new step or a chunk that does not fit drops the staging; the commit copy
// puts masters and slots where they belong.
#include "server/state_staging.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Chunk of `count` elements at `offset`: masters = 1000 + i, slot k = k * 100 + i.
void StageChunk(StateStaging& s, int64_t step, int64_t offset, int count, int slots,
                bool* ok = nullptr) {
  std::vector<float> params, state;
  for (int i = 0; i < count; ++i) params.push_back(1000.f + offset + i);
  for (int k = 0; k < slots; ++k) {
    for (int i = 0; i < count; ++i) state.push_back(k * 100.f + offset + i);
  }
  const bool staged = s.Stage(step, offset, Floats(params), Floats(state));
  if (ok != nullptr) *ok = staged;
}

TEST(StateStagingTest, OverlappingChunksCoverTheRangeOnceAndCopyInPlace) {
  StateStaging s(10, 2);
  EXPECT_EQ(s.step(), -1);
  StageChunk(s, 5, 6, 4, 2);
  StageChunk(s, 5, 0, 4, 2);
  EXPECT_EQ(s.staged(), 8);
  EXPECT_FALSE(s.Complete(5));
  StageChunk(s, 5, 3, 5, 2);  // overlaps both: adds 4 and 5 only
  EXPECT_EQ(s.staged(), 10);
  EXPECT_TRUE(s.Complete(5));
  EXPECT_FALSE(s.Complete(6));
  std::vector<float> values(10);
  std::vector<std::vector<float>> state(2, std::vector<float>(10));
  s.CopyTo(absl::MakeSpan(values), state);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(values[i], 1000.f + i);
    EXPECT_EQ(state[0][i], 0.f + i);
    EXPECT_EQ(state[1][i], 100.f + i);
  }
  s.Drop();
  EXPECT_EQ(s.staged(), 0);
  EXPECT_EQ(s.step(), -1);
}

TEST(StateStagingTest, ANewStepStartsOver) {
  StateStaging s(4, 1);
  StageChunk(s, 1, 0, 3, 1);
  StageChunk(s, 2, 2, 2, 1);
  EXPECT_EQ(s.step(), 2);
  EXPECT_EQ(s.staged(), 2);
}

TEST(StateStagingTest, AChunkThatDoesNotFitDropsEverything) {
  StateStaging s(4, 1);
  bool ok = false;
  StageChunk(s, 1, 0, 2, 1, &ok);
  ASSERT_TRUE(ok);
  StageChunk(s, 1, 3, 2, 1, &ok);  // [3, 5) is outside [0, 4)
  EXPECT_FALSE(ok);
  EXPECT_EQ(s.staged(), 0);
  EXPECT_EQ(s.step(), -1);
  StageChunk(s, 1, -1, 1, 1, &ok);
  EXPECT_FALSE(ok);
  EXPECT_FALSE(s.Stage(1, 0, std::string(6, '\0'), std::string(6, '\0')));  // not whole floats
  EXPECT_FALSE(s.Stage(1, 0, std::string(8, '\0'), std::string(4, '\0')));  // state != slots x
  EXPECT_TRUE(s.Stage(1, 4, "", ""));  // empty chunk at the end fits
}

TEST(StateStagingTest, NoSlots) {
  StateStaging s(3, 0);
  StageChunk(s, 0, 0, 3, 0);
  EXPECT_TRUE(s.Complete(0));
  std::vector<float> values(3);
  std::vector<std::vector<float>> state;
  s.CopyTo(absl::MakeSpan(values), state);
  EXPECT_EQ(values[2], 1002.f);
}

}  // namespace
}  // namespace tessel
