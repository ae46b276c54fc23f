// Token files (rpc/token_files.h): reading them, and comparing tokens in
// constant time.
#include "rpc/token_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/auth_testing.h"

namespace tessel {
namespace {

using auth_testing::kServer;
using auth_testing::kWorker;
using auth_testing::kWorkerA;
using auth_testing::WriteFile;

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

TEST(ReadTokenFileTest, ReadsFirstLineTrimmed) {
  auto t = ReadTokenFile("--token_file", WriteFile("good", "  tessel-admin-token-0123 \nrest\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-admin-token-0123");
}

TEST(ReadTokenFileTest, TakesTheTokenOfAScopedLineAndSkipsComments) {
  auto t = ReadTokenFile(
      "--token_file",
      WriteFile("scoped", "# the token of job mlp\n\ntessel-worker-token-0123 mlp\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-worker-token-0123");
}

TEST(ReadTokenFileTest, ShortOrMissingTokenIsRefused) {
  auto t = ReadTokenFile("--admin_token_file", WriteFile("short", "abc\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("at least 16 characters"), std::string::npos);
  t = ReadTokenFile("--admin_token_file", WriteFile("empty", "\n# nothing\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = ReadTokenFile("--admin_token_file", "/nonexistent/token");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("--admin_token_file '/nonexistent/token'"), std::string::npos)
      << t.status();
}

TEST(ReadRoleTokenFileTest, TokensWithScopes) {
  auto t = ReadRoleTokenFile(
      "--worker_token_file",
      WriteFile("workers", absl::StrCat("# workers\n", kWorker, "\n", kWorkerA, "  jobA,jobB\n")),
      Role::kWorker);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].token, kWorker);
  EXPECT_TRUE((*t)[0].jobs.empty());
  EXPECT_EQ((*t)[1].token, kWorkerA);
  EXPECT_EQ((*t)[1].jobs, (std::vector<std::string>{"jobA", "jobB"}));
  EXPECT_EQ((*t)[1].role, Role::kWorker);
}

TEST(ReadRoleTokenFileTest, BadFilesAreNamed) {
  auto dup = ReadRoleTokenFile("--worker_token_file",
                               WriteFile("dup", absl::StrCat(kWorker, " a\n", kWorker, " b\n")),
                               Role::kWorker);
  ASSERT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("lists one token twice"), std::string::npos);
  auto scoped_server = ReadRoleTokenFile(
      "--server_token_file", WriteFile("srv", absl::StrCat(kServer, " jobA\n")), Role::kServer);
  ASSERT_EQ(scoped_server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(scoped_server.status().message().find("only worker tokens have a job scope"),
            std::string::npos);
  auto fields = ReadRoleTokenFile(
      "--worker_token_file", WriteFile("fields", absl::StrCat(kWorker, " a b\n")), Role::kWorker);
  ASSERT_EQ(fields.status().code(), absl::StatusCode::kInvalidArgument);
  auto short_token =
      ReadRoleTokenFile("--worker_token_file", WriteFile("w-short", "abc\n"), Role::kWorker);
  ASSERT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_token.status().message().find("--worker_token_file"), std::string::npos);
}

// Token files are secrets (rpc/secret_file.h): one that others may read is
// refused before a token is taken from it, naming the flag and the fix.
TEST(ReadTokenFileTest, WorldReadableFileIsRefused) {
  const std::string path = WriteFile("readable", absl::StrCat(kWorker, "\n"));
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto t = ReadTokenFile("--token_file", path);
  ASSERT_EQ(t.status().code(), absl::StatusCode::kPermissionDenied) << t.status();
  EXPECT_NE(t.status().message().find("chmod 600 " + path), std::string::npos) << t.status();
  auto r = ReadRoleTokenFile("--worker_token_file", path, Role::kWorker);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("--worker_token_file '" + path + "' has mode 0644"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace tessel
