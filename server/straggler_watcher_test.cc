// StragglerWatcher over a real ShardJob: a rank whose pushes come late
// every step is named (log line with its host, metrics, stragglers()) and
// no longer named once it keeps pace; a step that stalls has the flight
// recorder written as a timeline, once.
#include "server/straggler_watcher.h"

#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/metrics.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int kWorld = 4;

class StragglerWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = InitializedJob(OneTensorSpec("slow", v1::STRATEGY_DDP, kWorld, 64, 64), 1);
    ASSERT_NE(job_, nullptr);
    StragglerWatcherOptions o;
    o.shard = 7;
    o.stall = absl::Seconds(5);
    o.dump_dir = ::testing::TempDir();
    watcher_ = std::make_unique<StragglerWatcher>(
        [this] { return std::vector<std::shared_ptr<ShardJob>>{job_}; }, o,
        [](const std::string& job, int reg) { return absl::StrCat("host h", reg, " pid 4", reg); },
        [this](const std::string& line) { lines_.push_back(line); });
  }

  void Push(int rank) {
    FrameHeader h = JobFrame(*job_, 1, FrameType::kPush, rank, 0);
    ASSERT_TRUE(job_->AcceptData(h).ok());
    ShardJob::Completion c = job_->CompleteReceive(h, absl::OkStatus());
    if (c.update) job_->UpdateBucket(*c.update);
  }

  // A pull of the step in progress's result (bucket 0), as a worker asks
  // for it after pushing.
  void Pull(int rank) {
    FrameHeader h = JobFrame(*job_, 1, FrameType::kPull, rank, 0);
    h.step = job_->version() + 1;
    h.payload_bytes = 0;
    h.bucket_count = 1;
    ASSERT_TRUE(job_->AcceptPull(h, /*reply_to=*/rank).ok());
  }

  // `n` steps at pace, rank `first` pushing first: in steps of microseconds
  // the order of the pushes alone gives the third of four ranks a score up
  // to 1.33 (its time over the median's), above the rule's leave_score.
  void PacedSteps(int n, int first) {
    for (int i = 0; i < n; ++i) {
      Push(first);
      for (int r = 0; r < kWorld; ++r) {
        if (r != first) Push(r);
      }
    }
  }

  // `n` steps; rank `late` (-1: none) pushes `delay` after the others.
  void Steps(int n, int late, absl::Duration delay) {
    for (int i = 0; i < n; ++i) {
      for (int r = 0; r < kWorld; ++r) {
        if (r != late) Push(r);
      }
      if (late >= 0) {
        absl::SleepFor(delay);
        Push(late);
      }
    }
  }

  double Gauge(const std::string& name, int rank) {
    const std::string text = metrics::Default().Expose();
    const std::string series =
        absl::StrCat(name, "{job=\"slow\",rank=\"", rank, "\",shard=\"7\"} ");
    const size_t at = text.find(series);
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size()));
  }

  std::shared_ptr<ShardJob> job_;
  std::unique_ptr<StragglerWatcher> watcher_;
  std::vector<std::string> lines_;
};

TEST_F(StragglerWatcherTest, NamesALateRankThenLetsItGo) {
  Steps(4, 2, absl::Milliseconds(30));
  watcher_->Pass(absl::Now());
  EXPECT_TRUE(lines_.empty()) << "too few steps to judge";
  EXPECT_EQ(Gauge("tessel_rank_straggler_score", 2), -1);
  Steps(5, 2, absl::Milliseconds(30));
  watcher_->Pass(absl::Now());
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(
      lines_[0], "job 'slow' shard 7: rank 2 (registry rank 2; host h2 pid 42) is a straggler"))
      << lines_[0];
  const std::vector<NamedStraggler> named = watcher_->stragglers();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].job, "slow");
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_GE(named[0].lateness_s, 0.03);
  EXPECT_GT(Gauge("tessel_rank_straggler_score", 2), 1.5);
  EXPECT_GE(Gauge("tessel_rank_lateness_seconds", 2), 0.03);
  EXPECT_LT(Gauge("tessel_rank_lateness_seconds", 0), 0.02);
  // Once it keeps pace for most of the window, it is let go.
  PacedSteps(8, /*first=*/2);
  watcher_->Pass(absl::Now());
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_TRUE(absl::StrContains(lines_[1],
                                "rank 2 (registry rank 2; host h2 pid 42) is no "
                                "longer a straggler"))
      << lines_[1];
  EXPECT_TRUE(watcher_->stragglers().empty());
}

TEST_F(StragglerWatcherTest, AStalledStepHasItsFlightRecorderWrittenOnce) {
  Steps(3, -1, absl::ZeroDuration());
  Push(0);
  Push(3);  // ranks 1 and 2 never push
  Pull(0);
  Pull(3);
  watcher_->Pass(absl::Now());
  EXPECT_TRUE(watcher_->dumps().empty()) << "not stalled yet";
  watcher_->Pass(absl::Now() + absl::Seconds(6));
  watcher_->Pass(absl::Now() + absl::Seconds(7));
  const std::vector<std::string> dumps = watcher_->dumps();
  ASSERT_EQ(dumps.size(), 1u) << "once per stalled step";
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines_[0], dumps[0])) << lines_[0];
  std::ifstream in(dumps[0]);
  std::stringstream text;
  text << in.rdbuf();
  std::string body = text.str();
  // The file is written as events come (a trailing comma): close the array.
  while (!body.empty() && (body.back() == '\n' || body.back() == ',')) body.pop_back();
  if (body.back() != ']') body += "]";
  const nlohmann::json events = nlohmann::json::parse(body);
  int waiting = 0, pushes = 0, steps = 0, pulls_waiting = 0;
  for (const auto& e : events) {
    if (!e.contains("name")) continue;
    if (e["name"] == "pull (waiting)") {
      ++pulls_waiting;
      EXPECT_TRUE(e["args"]["rank"] == 0 || e["args"]["rank"] == 3) << e;
    }
    if (e["name"] == "waiting") {
      ++waiting;
      EXPECT_EQ(e["args"]["step"], 3);
      EXPECT_TRUE(e["args"]["rank"] == 1 || e["args"]["rank"] == 2) << e;
    }
    if (e["name"] == "push") ++pushes;
    if (e["name"] == "step") ++steps;
  }
  EXPECT_EQ(waiting, 2);
  EXPECT_EQ(pulls_waiting, 2) << "ranks 0 and 3 asked for the stalled step's result";
  EXPECT_EQ(pushes, 3 * kWorld + 2);
  EXPECT_EQ(steps, 3) << "each finished step (the first from its first push)";
}

TEST_F(StragglerWatcherTest, ItsThreadLooksWhileOthersPushAndRead) {
  StragglerWatcherOptions o;
  o.shard = 8;
  o.period = absl::Milliseconds(1);
  o.stall = absl::ZeroDuration();
  std::atomic<int> lines{0};
  StragglerWatcher w([this] { return std::vector<std::shared_ptr<ShardJob>>{job_}; }, o, nullptr,
                     [&](const std::string&) { ++lines; });
  w.Start();
  // The job's steps (this thread), the watcher's looks (its thread) and a
  // heartbeat's reads (a third) at once; under TSan: no race.
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) (void)w.stragglers();
  });
  Steps(12, 1, absl::Milliseconds(25));
  absl::SleepFor(absl::Milliseconds(20));
  done = true;
  reader.join();
  w.Stop();
  EXPECT_EQ(lines.load(), 1) << "rank 1 named once";
  ASSERT_EQ(w.stragglers().size(), 1u);
  EXPECT_EQ(w.stragglers()[0].rank, 1);
}

}  // namespace
}  // namespace tessel
