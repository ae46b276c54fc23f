// JobCounters::Add: a replacement job carries on every count of the job it
// replaces.
#include "server/job_counters.h"

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(JobCountersTest, AddSumsEveryCount) {
  JobCounters a{1, 2, 3, 4, 5, 6, 7, 8};
  const JobCounters b{10, 20, 30, 40, 50, 60, 70, 80};
  a.Add(b);
  EXPECT_EQ(a.rejected, 11);
  EXPECT_EQ(a.stale_epoch, 22);
  EXPECT_EQ(a.applied_steps, 33);
  EXPECT_EQ(a.pushed_bytes, 44);
  EXPECT_EQ(a.pulled_bytes, 55);
  EXPECT_EQ(a.update_us, 66);
  EXPECT_EQ(a.folded_pushes, 77);
  EXPECT_EQ(a.recoveries, 88);
  // A new field that Add forgets would make the sizes differ from this sum.
  static_assert(sizeof(JobCounters) == 8 * sizeof(int64_t), "JobCounters gained a field: Add it");
}

}  // namespace
}  // namespace tessel
