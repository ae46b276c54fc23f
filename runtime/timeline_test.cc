#include "runtime/timeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "nlohmann/json.hpp"

namespace tessel {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

nlohmann::json Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

TEST(TimelineTest, WritesAChromeTraceArrayOfTheRecordedSteps) {
  const std::string path = TempPath("t.json");
  {
    auto t = Timeline::Open(path, "worker[3]", {.first_step = 2, .steps = 2});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_FALSE((*t)->Records(1));
    EXPECT_TRUE((*t)->Records(2));
    EXPECT_TRUE((*t)->Records(3));
    EXPECT_FALSE((*t)->Records(4));
    for (int64_t step = 1; step <= 4; ++step) {
      (*t)->Instant("push", "exchange", 1000 * step,
                    {.job = "mlp", .step = step, .rank = 3, .shard = 1, .bucket = 0});
      (*t)->Span("exchange", "exchange", 1000 * step, 1000 * step + 250,
                 {.job = "mlp", .step = step, .rank = 3});
    }
    (*t)->Span("reduce + update", "optimizer", 2000, 2100, {.step = 2, .shard = 1, .bucket = 0});
  }
  const nlohmann::json events = Read(path);  // valid JSON once closed
  ASSERT_TRUE(events.is_array());
  int instants = 0, spans = 0;
  std::set<std::string> threads;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "worker[3]");
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"]);
    if (e["ph"] == "M" && e["name"] == "process_labels") {
      EXPECT_EQ(e["args"]["labels"].get<std::string>().rfind("host=", 0), 0u);
    }
    if (e["ph"] == "i" && e["name"] == "push") {
      ++instants;
      EXPECT_EQ(e["args"]["rank"], 3);
      EXPECT_EQ(e["args"]["bucket"], 0);
    }
    if (e["ph"] == "X") {
      ++spans;
      EXPECT_GE(e["dur"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(instants, 2) << "steps 2 and 3 only";
  EXPECT_EQ(spans, 3);
  EXPECT_EQ(threads, (std::set<std::string>{"exchange", "optimizer"}));
}

TEST(TimelineTest, PathPatternsAndUnwritablePaths) {
  EXPECT_EQ(TimelinePath("/t/w-{rank}.json", 2, -1), "/t/w-2.json");
  EXPECT_EQ(TimelinePath("/t/s-{shard}.json", -1, 5), "/t/s-5.json");
  auto bad = Timeline::Open("/nonexistent-dir/x.json", "p");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("/nonexistent-dir/x.json"), std::string::npos);
}

// A symbolic link planted where a timeline goes (a server writes its flight
// recorder into $TMPDIR by itself) is refused; the link's target is untouched.
TEST(TimelineTest, ASymbolicLinkIsNotFollowed) {
  const std::string target = TempPath("target.txt");
  { std::ofstream(target) << "keep"; }
  const std::string link = TempPath("planted.json");
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  auto t = Timeline::Open(link, "p");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("symbolic link"), std::string::npos) << t.status();
  std::ifstream in(target);
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "keep");
}

TEST(TimelineTest, EveryStepWhenStepsIsZero) {
  auto t = Timeline::Open(TempPath("all.json"), "p", {.first_step = 1, .steps = 0});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE((*t)->Records(1));
  EXPECT_TRUE((*t)->Records(1000000));
  EXPECT_FALSE((*t)->Records(0));
}

}  // namespace
}  // namespace tessel
