// Secret files (rpc/secret_file.h): real files of each mode and owner, read
// through ReadSecretFile, and the rule on plain values.
#include "rpc/secret_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kOtherUid = 12345;

// A folder every user may pass through (a user other than root reads files
// in it), under /tmp: the test's own TEST_TMPDIR may sit below a folder
// only root may enter.
std::string Dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/secret_file_test.XXXXXX";
    const char* made = mkdtemp(tmpl);
    EXPECT_NE(made, nullptr);
    chmod(made, 0711);
    return new std::string(made);
  }();
  return *dir;
}

std::string Write(const std::string& name, mode_t mode, const std::string& text = "s3cret\n") {
  const std::string path = absl::StrCat(Dir(), "/", name);
  unlink(path.c_str());
  std::ofstream(path) << text;
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

TEST(ReadSecretFileTest, OwnerOnlyIsRead) {
  auto s = ReadSecretFile("--tls_key", Write("0600", 0600));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "s3cret\n");
  EXPECT_TRUE(ReadSecretFile("--tls_key", Write("0400", 0400)).ok());
}

TEST(ReadSecretFileTest, WorldReadableIsRefusedWithTheFix) {
  const std::string path = Write("0644", 0644);
  auto s = ReadSecretFile("--admin_token_file", path);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("--admin_token_file '" + path + "'"));
  EXPECT_THAT(s.status().message(), HasSubstr("has mode 0644"));
  EXPECT_THAT(s.status().message(), HasSubstr("chmod 600 " + path));
  EXPECT_EQ(ReadSecretFile("--tls_key", Write("0604", 0604)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ReadSecretFile("--tls_key", Write("0666", 0666)).status().code(),
            absl::StatusCode::kPermissionDenied);
}

// Root-owned and group-readable: a Kubernetes Secret with defaultMode 0440
// or 0640 and fsGroup. Accepted, also by a process running as root.
TEST(ReadSecretFileTest, RootOwnedGroupReadableIsRead) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to own a file as root";
  EXPECT_TRUE(ReadSecretFile("--token_file", Write("root-0640", 0640)).ok());
  EXPECT_TRUE(ReadSecretFile("--token_file", Write("root-0440", 0440)).ok());
  // Group write, group execute and any world access stay refused.
  EXPECT_FALSE(ReadSecretFile("--token_file", Write("root-0660", 0660)).ok());
  EXPECT_FALSE(ReadSecretFile("--token_file", Write("root-0644", 0644)).ok());
}

// Owned by the process's own user (not root): group read is refused. As
// root, the test reads the file as uid kOtherUid in a child process.
TEST(ReadSecretFileTest, UserOwnedGroupReadableIsRefused) {
  const std::string path = Write("user-0640", 0640);
  const std::string ok_path = Write("user-0600", 0600);
  if (geteuid() != 0) {
    auto s = ReadSecretFile("--worker_token_file", path);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied) << s.status();
    EXPECT_TRUE(ReadSecretFile("--worker_token_file", ok_path).ok());
    return;
  }
  ASSERT_EQ(chown(path.c_str(), kOtherUid, kOtherUid), 0) << std::strerror(errno);
  ASSERT_EQ(chown(ok_path.c_str(), kOtherUid, kOtherUid), 0) << std::strerror(errno);
  // As root, another user's 0640 file is read (its group is that user's
  // choice), as PostgreSQL's client does.
  EXPECT_TRUE(ReadSecretFile("--worker_token_file", path).ok());
  auto as_user = [&](const std::string& file) {
    if (setresgid(kOtherUid, kOtherUid, kOtherUid) != 0 ||
        setresuid(kOtherUid, kOtherUid, kOtherUid) != 0) {
      std::cerr << "setresuid failed";
      std::_Exit(2);
    }
    auto s = ReadSecretFile("--worker_token_file", file);
    std::cerr << s.status();
    std::_Exit(s.ok() ? 0 : 3);
  };
  EXPECT_EXIT(as_user(path), ::testing::ExitedWithCode(3),
              "has mode 0640 \\(owner uid 12345, this process's user\\).*chmod 600");
  EXPECT_EXIT(as_user(ok_path), ::testing::ExitedWithCode(0), "OK");
}

TEST(ReadSecretFileTest, MissingFolderAndHugeFiles) {
  auto s = ReadSecretFile("--tls_key", Dir() + "/absent");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(), HasSubstr("--tls_key"));
  EXPECT_EQ(ReadSecretFile("--tls_key", Dir()).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string big =
      Write("big", 0600, std::string(static_cast<size_t>(kMaxSecretFileBytes) + 1, 'x'));
  EXPECT_EQ(ReadSecretFile("--tls_key", big).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckSecretFileModeTest, TheRule) {
  struct Case {
    uid_t owner;
    mode_t mode;
    uid_t process;
    bool ok;
  };
  const Case cases[] = {
      {1000, 0600, 1000, true},  {1000, 0400, 1000, true},  {1000, 0640, 1000, false},
      {1000, 0604, 1000, false}, {1000, 0700, 1000, true},  {1000, 0610, 1000, false},
      {0, 0640, 1000, true},     {0, 0440, 1000, true},     {0, 0644, 1000, false},
      {0, 0660, 1000, false},    {0, 0650, 1000, false},    {0, 0640, 0, true},
      {0, 0600, 0, true},        {0, 0604, 0, false},       {2000, 0640, 1000, true},
      {2000, 0644, 1000, false}, {2000, 0660, 1000, false}, {1000, 0100600, 1000, true},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckSecretFileMode("--f", "/f", c.owner, c.mode, c.process);
    EXPECT_EQ(s.ok(), c.ok) << "owner " << c.owner << " mode " << std::oct << c.mode << std::dec
                            << " process " << c.process << ": " << s;
  }
}

}  // namespace
}  // namespace tessel
