#include "rpc/auth.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

TEST(ConstantTimeEqualsTest, Basics) {
  EXPECT_TRUE(ConstantTimeEquals("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdeX", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("X123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcde", "0123456789abcdef"));    // prefix
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef0", "0123456789abcdef"));  // longer
  // A repetition of the secret must not match (the loop wraps over the secret).
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // no secret: nothing matches
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(ReadTokenFileTest, ReadsFirstLineTrimmed) {
  auto t = ReadTokenFile("--token_file", WriteFile("good", "  tessel-admin-token-0123 \nrest\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-admin-token-0123");
}

TEST(ReadTokenFileTest, ShortOrMissingTokenIsRefused) {
  auto t = ReadTokenFile("--admin_token_file", WriteFile("short", "abc\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("at least 16 characters"), std::string::npos);
  t = ReadTokenFile("--admin_token_file", "/nonexistent/token");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("--admin_token_file '/nonexistent/token'"), std::string::npos)
      << t.status();
}

}  // namespace
}  // namespace tessel
