#include "runtime/timeline_flags.h"

#include "absl/flags/flag.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(TimelineFlagsTest, DefaultsAreTimelineOptions) {
  absl::StatusOr<TimelineFlags> t = TimelineFromFlags();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->path, "");
  EXPECT_EQ(t->window.first_step, TimelineOptions{}.first_step);
  EXPECT_EQ(t->window.steps, TimelineOptions{}.steps);
}

TEST(TimelineFlagsTest, ValuesAndRefusals) {
  absl::SetFlag(&FLAGS_timeline, "/tmp/t{rank}.json");
  absl::SetFlag(&FLAGS_timeline_first_step, 7);
  absl::SetFlag(&FLAGS_timeline_steps, 0);
  absl::StatusOr<TimelineFlags> t = TimelineFromFlags();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->path, "/tmp/t{rank}.json");
  EXPECT_EQ(t->window.first_step, 7);
  EXPECT_EQ(t->window.steps, 0);

  absl::SetFlag(&FLAGS_timeline_steps, -1);
  t = TimelineFromFlags();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--timeline_steps"), std::string::npos);
  absl::SetFlag(&FLAGS_timeline_steps, 10);
  absl::SetFlag(&FLAGS_timeline_first_step, -3);
  t = TimelineFromFlags();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--timeline_first_step"), std::string::npos);
}

}  // namespace
}  // namespace tessel
