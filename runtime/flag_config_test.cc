#include "runtime/flag_config.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

ABSL_FLAG(std::string, fc_listen, "127.0.0.1:0", "test flag");
ABSL_FLAG(int, fc_world, 1, "test flag");
ABSL_FLAG(double, fc_lr, 0.1, "test flag");
ABSL_FLAG(bool, fc_verbose, false, "test flag");
ABSL_FLAG(std::string, fc_layers, "", "test flag");
ABSL_FLAG(std::string, fc_pool, "default", "test flag");

namespace tessel {
namespace {

class FlagConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_fc_listen, "127.0.0.1:0");
    absl::SetFlag(&FLAGS_fc_world, 1);
    absl::SetFlag(&FLAGS_fc_lr, 0.1);
    absl::SetFlag(&FLAGS_fc_verbose, false);
    absl::SetFlag(&FLAGS_fc_layers, "");
    absl::SetFlag(&FLAGS_fc_pool, "default");
  }
  std::string Write(const std::string& text) {
    const std::string path = absl::StrCat(::testing::TempDir(), "/config_", counter_++, ".json");
    std::ofstream(path) << text;
    return path;
  }
  int counter_ = 0;
};

TEST_F(FlagConfigTest, AppliesCommonThenOwnSection) {
  const std::string path = Write(R"({
    "comment": "a job",
    "common": {"fc_pool": "gpu", "not_a_flag_of_this_binary": 3},
    "server": {"fc_listen": "0.0.0.0:7100", "fc_pool": "server-pool"},
    "worker": {"fc_world": 4, "fc_lr": 0.001, "fc_verbose": true, "fc_layers": [64, 512, 10]}
  })");
  ASSERT_TRUE(ApplyFlagConfig(path, "worker").ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_pool), "gpu");
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_world), 4);
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_lr), 0.001);
  EXPECT_TRUE(absl::GetFlag(FLAGS_fc_verbose));
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_layers), "64,512,10");
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_listen), "127.0.0.1:0");  // the server's section

  ASSERT_TRUE(ApplyFlagConfig(path, "server").ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_listen), "0.0.0.0:7100");
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_pool), "server-pool");  // own section after common
}

TEST_F(FlagConfigTest, MisspeltKeyIsAnErrorNamingIt) {
  const std::string path = Write(R"({"worker": {"fc_wrold": 4}})");
  absl::Status s = ApplyFlagConfig(path, "worker");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("worker.fc_wrold: not a flag of this program"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
}

TEST_F(FlagConfigTest, BadValueIsAnErrorAndNamesTheKey) {
  const std::string path = Write(R"({"worker": {"fc_world": "four"}})");
  absl::Status s = ApplyFlagConfig(path, "worker");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("worker.fc_world"), std::string::npos) << s;
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_world), 1);
  EXPECT_FALSE(ApplyFlagConfig(Write(R"({"worker": {"fc_world": {"a": 1}}})"), "worker").ok());
}

TEST_F(FlagConfigTest, RefusesUnknownSectionsBadJsonAndMissingFiles) {
  EXPECT_EQ(ApplyFlagConfig(Write(R"({"wokrer": {}})"), "worker").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyFlagConfig(Write("{not json"), "worker").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyFlagConfig(Write("[1, 2]"), "worker").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyFlagConfig(Write(R"({"worker": {"config": "other.json"}})"), "worker").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyFlagConfig("/nonexistent/tessel.json", "worker").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(FlagConfigTest, CommandLineOverridesTheFile) {
  const std::string path = Write(R"({"worker": {"fc_world": 4, "fc_lr": 0.5}})");
  const std::string config_arg = "--config=" + path;
  std::string a0 = "prog", a1 = config_arg, a2 = "--fc_world=8";
  char* argv[] = {a0.data(), a1.data(), a2.data()};
  EXPECT_EQ(FindConfigArg(3, argv), path);
  std::vector<char*> rest = ParseCommandLineWithConfig(3, argv, "worker");
  EXPECT_EQ(rest.size(), 1u);
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_world), 8);
  EXPECT_EQ(absl::GetFlag(FLAGS_fc_lr), 0.5);
  std::string b1 = "--config", b2 = path;
  char* argv2[] = {a0.data(), b1.data(), b2.data()};
  EXPECT_EQ(FindConfigArg(3, argv2), path);
}

}  // namespace
}  // namespace tessel
