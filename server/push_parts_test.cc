// PushParts: each micro-batch part of a rank's bucket is taken once a step;
// a replay is refused with the documented message and changes nothing; a
// failed receive frees its part, and so does the next step.
#include "server/push_parts.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(PushPartsTest, APartIsTakenOncePerStep) {
  PushParts parts;
  EXPECT_TRUE(parts.Take(0, 1, 0, 5).ok());
  EXPECT_TRUE(parts.Take(0, 1, 1, 5).ok());
  EXPECT_TRUE(parts.Take(0, 0, 0, 5).ok()) << "another rank";
  EXPECT_TRUE(parts.Take(1, 1, 0, 5).ok()) << "another bucket";
  EXPECT_EQ(parts.size(), 4u);
  parts.NextStep();
  EXPECT_EQ(parts.size(), 0u);
  EXPECT_TRUE(parts.Take(0, 1, 0, 6).ok()) << "the next step's part 0";
}

TEST(PushPartsTest, AReplayedPartIsRefusedAndChangesNothing) {
  PushParts parts;
  ASSERT_TRUE(parts.Take(2, 1, 7, 5).ok());
  const absl::Status replay = parts.Take(2, 1, 7, 5);
  EXPECT_TRUE(absl::IsAlreadyExists(replay)) << replay;
  EXPECT_EQ(replay.message(),
            "rank 1 already pushed part 7 of bucket 2 in step 5 (a replayed part)");
  EXPECT_EQ(parts.size(), 1u);
  EXPECT_TRUE(absl::IsAlreadyExists(parts.Take(2, 1, 7, 5))) << "still taken";
}

TEST(PushPartsTest, AFailedReceiveFreesOnlyItsPart) {
  PushParts parts;
  ASSERT_TRUE(parts.Take(0, 1, 0, 3).ok());
  ASSERT_TRUE(parts.Take(0, 1, 1, 3).ok());
  parts.Failed(0, 1, 1);
  EXPECT_TRUE(parts.Take(0, 1, 1, 3).ok()) << "its receive failed: it may come again";
  EXPECT_FALSE(parts.Take(0, 1, 0, 3).ok()) << "the other part stays taken";
  parts.Failed(1, 0, 9);  // never taken: nothing to free
  EXPECT_EQ(parts.size(), 2u);
}

}  // namespace
}  // namespace tessel
