#include "runtime/log.h"

#include <gtest/gtest.h>

#include "absl/time/civil_time.h"
#include "nlohmann/json.hpp"

namespace tessel {
namespace {

absl::Time Moment() {
  return absl::FromCivil(absl::CivilSecond(2026, 11, 25, 1, 56, 3), absl::UTCTimeZone()) +
         absl::Milliseconds(123);
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogLabel("server[1]");
    SetLogContext({});
    SetLogFormat(LogFormat::kText);
  }
  void TearDown() override {
    SetLogContext({});
    SetLogFormat(LogFormat::kText);
  }
};

TEST_F(LogTest, TimestampsAreRfc3339Utc) {
  EXPECT_EQ(FormatRfc3339Utc(Moment()), "2026-11-25T01:56:03.123Z");
  // The zone of the machine plays no part: the same instant from another zone.
  EXPECT_EQ(FormatRfc3339Utc(absl::FromCivil(absl::CivilSecond(2026, 11, 24, 17, 56, 3),
                                             absl::FixedTimeZone(-8 * 3600))),
            "2026-11-25T01:56:03.000Z");
}

TEST_F(LogTest, TextLineHasLevelTimeProcessSourceAndMessage) {
  EXPECT_EQ(internal::FormatLogLine(LogLevel::kWarning, Moment(), "server/shard_job.cc", 88,
                                    "job mlp: slow"),
            "W 2026-11-25T01:56:03.123Z server[1] shard_job.cc:88] job mlp: slow\n");
}

TEST_F(LogTest, JsonLineCarriesContextFields) {
  SetLogFormat(LogFormat::kJson);
  SetLogContext({.job = "mlp", .rank = 3});
  SetLogStep(40);
  const std::string line =
      internal::FormatLogLine(LogLevel::kInfo, Moment(), "worker/worker.cc", 12, "say \"hi\"\n");
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line, the message's newline escaped";
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["time"], "2026-11-25T01:56:03.123Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["process"], "server[1]");
  EXPECT_EQ(j["source"], "worker.cc:12");
  EXPECT_EQ(j["job"], "mlp");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["step"], 40);
  EXPECT_FALSE(j.contains("shard")) << "absent fields are left out";
  EXPECT_EQ(j["msg"], "say \"hi\"\n");
}

TEST_F(LogTest, ScopedContextOverridesFieldByFieldAndNests) {
  SetLogFormat(LogFormat::kJson);
  SetLogContext({.shard = 2});
  {
    ScopedLogContext outer({.job = "a", .step = 7});
    {
      ScopedLogContext inner({.job = "b"});
      const auto j =
          nlohmann::json::parse(internal::FormatLogLine(LogLevel::kInfo, Moment(), "f.cc", 1, "m"));
      EXPECT_EQ(j["job"], "b");
      EXPECT_EQ(j["step"], 7);
      EXPECT_EQ(j["shard"], 2);
    }
    const auto j =
        nlohmann::json::parse(internal::FormatLogLine(LogLevel::kInfo, Moment(), "f.cc", 1, "m"));
    EXPECT_EQ(j["job"], "a");
  }
  const auto j =
      nlohmann::json::parse(internal::FormatLogLine(LogLevel::kInfo, Moment(), "f.cc", 1, "m"));
  EXPECT_FALSE(j.contains("job"));
  EXPECT_FALSE(j.contains("step"));
}

TEST_F(LogTest, RateLimitedCallSitesSayTrueOncePerPeriod) {
  std::atomic<int64_t> last{0};
  EXPECT_TRUE(internal::ShouldLogNow(&last, absl::Seconds(10)));
  EXPECT_FALSE(internal::ShouldLogNow(&last, absl::Seconds(10)));
  EXPECT_FALSE(internal::ShouldLogNow(&last, absl::Seconds(10)));
  EXPECT_TRUE(internal::ShouldLogNow(&last, absl::ZeroDuration())) << "the period is over";
  // Each call site has its own clock; the streamed expression is evaluated
  // only when the line is written.
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  for (int i = 0; i < 5; ++i) TESSEL_LOG_EVERY_N_SEC(DEBUG, 60) << count();
  SetMinLogLevel(LogLevel::kDebug);
  for (int i = 0; i < 5; ++i) TESSEL_LOG_EVERY_N_SEC(DEBUG, 60) << count();
  for (int i = 0; i < 5; ++i) TESSEL_LOG_EVERY_N_SEC(DEBUG, 60) << count();
  SetMinLogLevel(LogLevel::kInfo);
  EXPECT_EQ(evaluated, 2);
}

TEST_F(LogTest, InvalidUtf8IsReplacedNotThrown) {
  SetLogFormat(LogFormat::kJson);
  const std::string line =
      internal::FormatLogLine(LogLevel::kError, Moment(), "f.cc", 1, std::string("bad \xff byte"));
  EXPECT_NO_THROW(nlohmann::json::parse(line));
}

TEST_F(LogTest, LevelAndFormatNamesParseOrAreRefused) {
  LogLevel level;
  EXPECT_TRUE(ParseLogLevel("WARNING", &level).ok());
  EXPECT_EQ(level, LogLevel::kWarning);
  EXPECT_TRUE(ParseLogLevel("warn", &level).ok());
  EXPECT_TRUE(ParseLogLevel("debug", &level).ok());
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("loud", &level).ok());
  LogFormat format;
  EXPECT_TRUE(ParseLogFormat("json", &format).ok());
  EXPECT_EQ(format, LogFormat::kJson);
  const absl::Status bad = ParseLogFormat("xml", &format);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("text, json"), std::string::npos);
}

}  // namespace
}  // namespace tessel
