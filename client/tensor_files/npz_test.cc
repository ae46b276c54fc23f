// WriteNpz: one NAME.npy member per tensor holding numpy's own header and
// the data; np.load reads every shape back bitwise (0-d included, zip64
// records included); refusals write nothing.
#include "client/tensor_files/npz.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/tensor_files/testing.h"
#include "core/npy.h"
#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

std::string Write(const std::vector<NamedTensor>& tensors, bool zip64 = false) {
  std::ostringstream out;
  const absl::Status s = WriteNpz(tensors, &out, zip64);
  EXPECT_TRUE(s.ok()) << s;
  return out.str();
}

TEST(NpzTest, OneNpyMemberPerTensorInOrder) {
  auto sample = testing::MakeSample();
  auto zip = testing::ReadZip(Write(sample->tensors));
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_FALSE(zip->zip64_end);
  ASSERT_EQ(zip->entries.size(), sample->tensors.size());
  for (size_t k = 0; k < sample->tensors.size(); ++k) {
    const NamedTensor& t = sample->tensors[k];
    const testing::ZipEntry& e = zip->entries[k];
    EXPECT_EQ(e.name, t.name + ".npy");
    const std::string header = NpyHeaderF32(t.shape);
    EXPECT_EQ(e.data.substr(0, header.size()), header) << t.name;
    EXPECT_EQ(e.data.substr(header.size()),
              std::string(reinterpret_cast<const char*>(t.data.data()), 4 * t.data.size()))
        << t.name;
  }
}

TEST(NpzTest, RefusalsWriteNothing) {
  const std::vector<float> one(1);
  std::ostringstream out;
  const absl::Status s = WriteNpz({{"a", {}, one}, {"a", {1}, one}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a' appears more than once"), absl::string_view::npos) << s;
  EXPECT_TRUE(out.str().empty());
}

constexpr char kCheck[] = R"py(
import json, sys
import numpy as np

path, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
with np.load(path) as z:
    assert list(z.keys()) == list(expected), (list(z.keys()), list(expected))
    for name, want in expected.items():
        a = z[name]
        assert a.dtype == np.dtype("<f4"), (name, a.dtype)
        assert list(a.shape) == want["shape"], (name, a.shape)
        assert a.tobytes().hex() == want["hex"], name
)py";

TEST(NpzTest, NumpyLoadsEveryShapeBitwise) {
  if (!testing::HavePythonModule("numpy")) GTEST_SKIP() << testing::kPython << " lacks numpy";
  auto sample = testing::MakeSample();
  const std::string expected = testing::WriteExpected(sample->tensors, "npz_expected.json");
  for (bool zip64 : {false, true}) {
    const std::string path = testing::TmpPath(absl::StrCat("sample", zip64, ".npz"));
    std::ofstream(path, std::ios::binary) << Write(sample->tensors, zip64);
    std::string out;
    EXPECT_EQ(testing::RunPython(kCheck, {path, expected}, &out), 0) << "zip64 " << zip64 << out;
  }
}

}  // namespace
}  // namespace tessel::tensor_files
