// WriteFileAtomically: the file appears whole or not at all, an existing one
// is kept unless asked, and nothing is left behind on failure.
#include "client/tensor_files/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "client/tensor_files/testing.h"
#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

auto Writes(const std::string& text) {
  return [text](std::ostream* out) {
    *out << text;
    return absl::OkStatus();
  };
}

TEST(OutputFileTest, WritesAndRefusesToOverwriteUnlessAsked) {
  const std::string path = testing::TmpPath("out.bin");
  unlink(path.c_str());
  ASSERT_TRUE(WriteFileAtomically(path, false, Writes("first")).ok());
  EXPECT_EQ(testing::ReadFile(path), "first");
  EXPECT_FALSE(Exists(path + ".tmp"));

  EXPECT_EQ(CheckOutputPath(path, false).code(), absl::StatusCode::kAlreadyExists);
  const absl::Status s = WriteFileAtomically(path, false, Writes("second"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("--force"), absl::string_view::npos) << s;
  EXPECT_EQ(testing::ReadFile(path), "first");

  ASSERT_TRUE(WriteFileAtomically(path, true, Writes("third")).ok());
  EXPECT_EQ(testing::ReadFile(path), "third");
  EXPECT_FALSE(Exists(path + ".tmp"));
}

// Exports are private to their writer, whatever the umask, also when they
// replace a file (or a leftover temporary) that others could read.
TEST(OutputFileTest, FilesAreOwnerOnly) {
  const std::string path = testing::TmpPath("private.bin");
  unlink(path.c_str());
  const mode_t old_umask = umask(0);
  ASSERT_TRUE(WriteFileAtomically(path, false, Writes("model")).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  std::ofstream(path + ".tmp") << "leftover";
  ASSERT_EQ(chmod((path + ".tmp").c_str(), 0644), 0);
  ASSERT_TRUE(WriteFileAtomically(path, true, Writes("again")).ok());
  umask(old_umask);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(testing::ReadFile(path), "again");
}

TEST(OutputFileTest, AFailedWriteLeavesNothing) {
  const std::string path = testing::TmpPath("failed.bin");
  unlink(path.c_str());
  const absl::Status s = WriteFileAtomically(path, false, [](std::ostream* out) {
    *out << "partial";
    return absl::DataLossError("the source went away");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "the source went away");
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(OutputFileTest, AnotherWritersTemporaryFileIsNotTouched) {
  const std::string path = testing::TmpPath("busy.bin");
  unlink(path.c_str());
  std::ofstream(path + ".tmp") << "theirs";
  const absl::Status s = WriteFileAtomically(path, false, Writes("mine"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("remove it"), absl::string_view::npos) << s;
  EXPECT_EQ(testing::ReadFile(path + ".tmp"), "theirs");
  EXPECT_FALSE(Exists(path));
  ASSERT_TRUE(WriteFileAtomically(path, true, Writes("mine")).ok());  // --force
  EXPECT_EQ(testing::ReadFile(path), "mine");
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(OutputFileTest, BadPathsAreRefusedUpFront) {
  EXPECT_EQ(CheckOutputPath("", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckOutputPath(testing::TmpPath("no/such/folder/x.bin"), false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckOutputPath(testing::TmpPath(""), true).code(),
            absl::StatusCode::kInvalidArgument);  // a folder
  EXPECT_TRUE(CheckOutputPath("relative-name.bin", false).ok() || Exists("relative-name.bin"));
}

}  // namespace
}  // namespace tessel::tensor_files
