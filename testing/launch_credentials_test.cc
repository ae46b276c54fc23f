// MakeLaunchCredentials: three distinct random tokens in private files that
// LoadAuthOptions takes as the three roles, made once per run directory.
#include "testing/launch_credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace tessel {
namespace {

std::string NewDir() {
  std::string tmpl = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                     "/launch-credentials-XXXXXX";
  return mkdtemp(tmpl.data());
}

int Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST(LaunchCredentialsTest, PrivateFilesThreeRoles) {
  const std::string run = NewDir();
  auto c = MakeLaunchCredentials(run);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Mode(c->dir), 0700);
  for (const std::string& f : {c->admin_token_file, c->worker_token_file, c->server_token_file}) {
    EXPECT_EQ(Mode(f), 0600) << f;
    EXPECT_GE(Read(f).size(), 40u) << f;  // 32 bytes, base64
  }
  EXPECT_NE(Read(c->admin_token_file), Read(c->worker_token_file));
  EXPECT_NE(Read(c->worker_token_file), Read(c->server_token_file));
  EXPECT_EQ(c->auth.token, Read(c->admin_token_file));
  ASSERT_EQ(c->auth.worker_tokens.size(), 1u);
  EXPECT_EQ(c->auth.worker_tokens[0].token, Read(c->worker_token_file));
  EXPECT_TRUE(c->auth.worker_tokens[0].jobs.empty());  // any job of this launch
  ASSERT_EQ(c->auth.server_tokens.size(), 1u);
  const std::vector<std::string> flags = c->ServerFlags();
  ASSERT_EQ(flags.size(), 3u);
  EXPECT_EQ(flags[2], "--token_file=" + c->server_token_file);
}

TEST(LaunchCredentialsTest, EveryLaunchItsOwnTokens) {
  const std::string run = NewDir();  // one run directory used twice
  auto a = MakeLaunchCredentials(run);
  auto b = MakeLaunchCredentials(run);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->dir, b->dir);
  EXPECT_NE(a->auth.token, b->auth.token);
  EXPECT_NE(Read(a->worker_token_file), Read(b->worker_token_file));
}

TEST(LaunchCredentialsTest, MissingRunDirectoryIsAnError) {
  auto c = MakeLaunchCredentials("/nonexistent/run");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/run"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace tessel
