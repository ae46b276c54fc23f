// ZipWriter: CRC-32, stored entries with their sizes and CRCs, alignment by
// torch's "FB" padding, zip64 records, refusals; and Python's zipfile reads
// what it writes.
#include "client/tensor_files/zip_writer.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/tensor_files/testing.h"
#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

using testing::ReadZip;

TEST(Crc32Test, KnownValuesAndContinuation) {
  EXPECT_EQ(Crc32(""), 0u);
  EXPECT_EQ(Crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(Crc32("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  EXPECT_EQ(Crc32("6789", Crc32("12345")), 0xCBF43926u);
  EXPECT_EQ(Crc32("3\n"), 0x55679ed1u);  // torch's version record, as torch.save wrote it
}

std::string Archive(ZipWriter::Options options, int entries) {
  std::ostringstream out;
  ZipWriter zip(&out, options);
  for (int i = 0; i < entries; ++i) {
    const std::string body(static_cast<size_t>(i * 37), static_cast<char>('a' + i % 26));
    EXPECT_TRUE(zip.Add(absl::StrCat("dir/entry", i),
                        {body.substr(0, body.size() / 2), body.substr(body.size() / 2)})
                    .ok());
  }
  EXPECT_TRUE(zip.Finish().ok());
  EXPECT_EQ(zip.bytes_written(), static_cast<int64_t>(out.str().size()));
  return out.str();
}

TEST(ZipWriterTest, StoredEntriesWithTheirCrcsAndOptionalAlignment) {
  for (int64_t align : {1, 64}) {
    for (bool zip64 : {false, true}) {
      SCOPED_TRACE(absl::StrCat("align ", align, " zip64 ", zip64));
      ZipWriter::Options o;
      o.align = align;
      o.force_zip64 = zip64;
      auto zip = ReadZip(Archive(o, 5));
      ASSERT_TRUE(zip.ok()) << zip.status();
      EXPECT_EQ(zip->zip64_end, zip64);
      ASSERT_EQ(zip->entries.size(), 5u);
      for (int i = 0; i < 5; ++i) {
        const testing::ZipEntry& e = zip->entries[i];
        EXPECT_EQ(e.name, absl::StrCat("dir/entry", i));
        EXPECT_EQ(e.data, std::string(static_cast<size_t>(i * 37), static_cast<char>('a' + i)));
        EXPECT_EQ(e.data_offset % align, 0u);
        EXPECT_EQ(e.flags, 0x0800);  // UTF-8 names, sizes in the local header
        EXPECT_EQ(e.zip64, zip64);
      }
    }
  }
}

TEST(ZipWriterTest, EqualInputsGiveEqualBytes) {
  ZipWriter::Options o;
  o.align = 64;
  EXPECT_EQ(Archive(o, 3), Archive(o, 3));
  auto empty = ReadZip(Archive(o, 0));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->entries.empty());
}

TEST(ZipWriterTest, RefusesDuplicatesBadNamesAndUseAfterFinish) {
  std::ostringstream out;
  ZipWriter zip(&out, {});
  ASSERT_TRUE(zip.Add("a", {"x"}).ok());
  EXPECT_EQ(zip.Add("a", {"y"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(zip.Add("", {"y"}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(zip.Finish().ok());
  EXPECT_EQ(zip.Add("b", {"z"}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(zip.Finish().code(), absl::StatusCode::kFailedPrecondition);
  ZipWriter::Options huge;
  huge.align = 1 << 20;
  ZipWriter bad(&out, huge);
  EXPECT_EQ(bad.Add("a", {"x"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ZipWriterTest, AStreamErrorIsDataLossAndFinal) {
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  ZipWriter zip(&out, {});
  EXPECT_EQ(zip.Add("a", {"x"}).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(zip.Finish().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ZipWriterTest, PythonsZipfileReadsIt) {
  if (!testing::HavePythonModule("zipfile")) GTEST_SKIP() << "no " << testing::kPython;
  for (bool zip64 : {false, true}) {
    ZipWriter::Options o;
    o.align = 64;
    o.force_zip64 = zip64;
    const std::string path = testing::TmpPath(absl::StrCat("z", zip64, ".zip"));
    std::ofstream(path, std::ios::binary) << Archive(o, 4);
    std::string out;
    EXPECT_EQ(testing::RunPython(R"py(
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
names = [i.filename for i in z.infolist()]
assert names == ["dir/entry%d" % i for i in range(4)], names
for i in range(4):
    assert z.read("dir/entry%d" % i) == bytes([ord("a") + i]) * (37 * i)
)py",
                                 {path}, &out),
              0)
        << out;
  }
}

}  // namespace
}  // namespace tessel::tensor_files
