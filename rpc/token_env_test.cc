// PresentedToken: the program's token, else $TESSEL_TOKEN, else the file
// $TESSEL_TOKEN_FILE names.
#include "rpc/token_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "rpc/auth_testing.h"

namespace tessel {
namespace {

class TokenEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TESSEL_TOKEN");
    unsetenv("TESSEL_TOKEN_FILE");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(TokenEnvTest, GivenFirstThenTokenThenFile) {
  const std::string file =
      auth_testing::WriteFile("presented", std::string(auth_testing::kWorker) + "\n");
  auto t = PresentedToken("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "");
  setenv("TESSEL_TOKEN_FILE", file.c_str(), 1);
  t = PresentedToken("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, auth_testing::kWorker);
  setenv("TESSEL_TOKEN", "from-the-environment", 1);
  EXPECT_EQ(PresentedToken("").value(), "from-the-environment");
  EXPECT_EQ(PresentedToken("given").value(), "given");
}

TEST_F(TokenEnvTest, UnreadableFileNamesTheVariable) {
  setenv("TESSEL_TOKEN_FILE", "/nonexistent/token", 1);
  auto t = PresentedToken("");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("$TESSEL_TOKEN_FILE"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace tessel
