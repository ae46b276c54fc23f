#include "worker/checkpoint_watch.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

WorkerOptions Options(absl::Duration interval, int64_t every_steps = 0) {
  WorkerOptions o;
  o.job = "watched";
  o.checkpoint.every_steps = every_steps;
  o.checkpoint_interval = interval;
  o.checkpoint_report_interval = absl::Seconds(30);
  return o;
}

v1::ShardStats Shard(int64_t failing_since, const std::string& error = "") {
  v1::ShardStats st;
  st.set_checkpoint_failing_since(failing_since);
  st.set_checkpoint_error(error);
  return st;
}

// What the watch asked of the job.
struct Calls {
  int requests = 0;
  int stats = 0;
  absl::Status request_answer;
  absl::StatusOr<std::vector<v1::ShardStats>> stats_answer = std::vector<v1::ShardStats>();
  void After(CheckpointWatch& w, absl::Duration since_start) {
    w.AfterStep(
        kStart + since_start, "rank 0",
        [this] {
          ++requests;
          return request_answer;
        },
        [this] {
          ++stats;
          return stats_answer;
        });
  }
};

TEST(CheckpointWatchTest, AsksForATimeBasedCheckpointOncePerInterval) {
  CheckpointWatch w(Options(absl::Seconds(10)), kStart);
  Calls c;
  c.After(w, absl::Seconds(5));
  EXPECT_EQ(c.requests, 0);
  c.After(w, absl::Seconds(10));
  EXPECT_EQ(c.requests, 1);
  c.After(w, absl::Seconds(15));
  EXPECT_EQ(c.requests, 1);
  c.request_answer = absl::FailedPreconditionError("DDP");  // logged, then asked again later
  c.After(w, absl::Seconds(21));
  c.After(w, absl::Seconds(32));
  EXPECT_EQ(c.requests, 3);
}

TEST(CheckpointWatchTest, NoCheckpointsNoRequestsNoReports) {
  CheckpointWatch w(Options(absl::ZeroDuration()), kStart);
  Calls c;
  c.After(w, absl::Hours(1));
  EXPECT_EQ(c.requests, 0);
  EXPECT_EQ(c.stats, 0);
  EXPECT_EQ(w.failing_since(), -1);
}

TEST(CheckpointWatchTest, ReportsTheEarliestFailingStepUntilCheckpointsSucceedAgain) {
  CheckpointWatch w(Options(absl::ZeroDuration(), /*every_steps=*/5), kStart);
  Calls c;
  c.stats_answer = std::vector<v1::ShardStats>{Shard(-1), Shard(15, "shard 1: disk full"),
                                               Shard(10, "shard 2: disk full")};
  c.After(w, absl::Seconds(29));  // not due yet
  EXPECT_EQ(c.stats, 0);
  EXPECT_EQ(w.failing_since(), -1);
  c.After(w, absl::Seconds(30));
  EXPECT_EQ(c.stats, 1);
  EXPECT_EQ(w.failing_since(), 10);
  c.stats_answer = absl::UnavailableError("shard 2 is restarting");  // keeps what it knew
  c.After(w, absl::Seconds(60));
  EXPECT_EQ(c.stats, 2);
  EXPECT_EQ(w.failing_since(), 10);
  c.stats_answer = std::vector<v1::ShardStats>{Shard(-1), Shard(-1), Shard(-1)};
  c.After(w, absl::Seconds(75));  // 15 s after the last look: not due
  EXPECT_EQ(w.failing_since(), 10);
  c.After(w, absl::Seconds(90));
  EXPECT_EQ(w.failing_since(), -1);
  EXPECT_EQ(c.requests, 0);
}

}  // namespace
}  // namespace tessel
