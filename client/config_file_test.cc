#include "client/config_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tessel::ctl {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tesselctl_config_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }
  void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  std::string dir_;
};

TEST_F(ConfigFileTest, MissingFileIsAnEmptyConfig) {
  absl::StatusOr<Config> c = LoadConfig(dir_ + "/none");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->contexts.empty());
  EXPECT_EQ(c->current_context, "");
}

TEST_F(ConfigFileTest, SaveThenLoadKeepsEveryKeyPrivately) {
  Config config;
  config.current_context = "prod";
  Context prod{"prod", {}};
  for (const std::string& k : ContextKeys()) prod.values[k] = "v-" + k;
  config.contexts.push_back(prod);
  config.contexts.push_back({"dev", {{"registry", "127.0.0.1:7070"}}});
  const std::string path = dir_ + "/a/b/config";  // folders created
  ASSERT_TRUE(SaveConfig(path, config).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  absl::StatusOr<Config> back = LoadConfig(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->current_context, "prod");
  ASSERT_EQ(back->contexts.size(), 2u);
  ASSERT_NE(back->Find("prod"), nullptr);
  EXPECT_EQ(back->Find("prod")->values, prod.values);
  EXPECT_EQ(back->Find("dev")->values.at("registry"), "127.0.0.1:7070");
  EXPECT_EQ(back->Find("nope"), nullptr);
}

TEST_F(ConfigFileTest, RefusesBadFilesNamingThem) {
  const std::string path = dir_ + "/config";
  for (const std::string& text : {std::string("contexts: [unclosed"), std::string("- a list\n"),
                                  std::string("contexts:\n  - name: a\n    colour: red\n"),
                                  std::string("contexts:\n  - registry: x:1\n"),
                                  std::string("contexts:\n  - name: a\n  - name: a\n")}) {
    Write(path, text);
    absl::StatusOr<Config> c = LoadConfig(path);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status();
  }
}

TEST_F(ConfigFileTest, PathFollowsTheEnvironment) {
  ::setenv("TESSEL_CONFIG", "/x/y", 1);
  EXPECT_EQ(ConfigPath(), "/x/y");
  ::unsetenv("TESSEL_CONFIG");
  ::setenv("XDG_CONFIG_HOME", "/xdg", 1);
  EXPECT_EQ(ConfigPath(), "/xdg/tessel/config");
  ::unsetenv("XDG_CONFIG_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(ConfigPath(), "/home/u/.config/tessel/config");
}

}  // namespace
}  // namespace tessel::ctl
