// WriteTorchStateDict: the pickle opcode by opcode, the zip layout torch.save
// writes (entries under one folder, data at multiples of 64), refusals that
// write nothing, and torch.load (Debian's torch 1.13) reading every shape
// back bitwise, zip64 records included.
#include "client/tensor_files/torch_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/tensor_files/testing.h"
#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

std::string Write(const std::vector<NamedTensor>& tensors, TorchFileOptions options = {}) {
  std::ostringstream out;
  const absl::Status s = WriteTorchStateDict(tensors, &out, options);
  EXPECT_TRUE(s.ok()) << s;
  return out.str();
}

std::string Bytes(std::initializer_list<absl::string_view> parts) {
  std::string s;
  for (absl::string_view p : parts) s.append(p.data(), p.size());
  return s;
}

TEST(TorchFileTest, ThePickleOpcodeByOpcode) {
  const std::vector<float> v(2);
  const std::string ordered_dict = "ccollections\nOrderedDict\n)R";
  EXPECT_EQ(TorchStateDictPickle({}), Bytes({"\x80\x02", ordered_dict, "."}));
  EXPECT_EQ(TorchStateDictPickle({{"a", {2}, v}}),
            Bytes({"\x80\x02", ordered_dict, "(",            // {
                   std::string("X\x01\0\0\0a", 6),           // "a":
                   "ctorch._utils\n_rebuild_tensor_v2\n((",  // _rebuild_tensor_v2((
                   std::string("X\x07\0\0\0storage", 12),    // "storage",
                   "ctorch\nFloatStorage\n",                 // FloatStorage,
                   std::string("X\x01\0\0\0"
                               "0",
                               6),                               // "0",
                   std::string("X\x03\0\0\0cpu", 8),             // "cpu",
                   "K\x02tQ",                                    // 2) as persistent id,
                   std::string("K\0", 2), "(K\x02t(K\x01t\x89",  // 0, (2,), (1,), False,
                   ordered_dict, "tR",                           // OrderedDict())
                   "u."}));
}

TEST(TorchFileTest, IntegersTakeTheSmallestOpcode) {
  const std::string p =
      TorchStateDictPickle({{"t", {300, 70000, int64_t{3000000000}}, absl::Span<const float>()}});
  // shape (300, 70000, 3000000000): BININT2, BININT, LONG1 of 5 bytes (the
  // sign bit of 0xB2D05E00 needs a zero byte above it).
  EXPECT_NE(p.find(Bytes({"(M", std::string("\x2c\x01", 2), "J", std::string("\x70\x11\x01\x00", 4),
                          "\x8a\x05", std::string("\x00\x5e\xd0\xb2\x00", 5), "t"})),
            std::string::npos);
}

TEST(TorchFileTest, ZipLayoutIsTorchSaves) {
  auto sample = testing::MakeSample();
  TorchFileOptions options;
  options.archive = "model";
  auto zip = testing::ReadZip(Write(sample->tensors, options));
  ASSERT_TRUE(zip.ok()) << zip.status();
  ASSERT_EQ(zip->entries.size(), sample->tensors.size() + 3);
  EXPECT_EQ(zip->entries[0].name, "model/data.pkl");
  EXPECT_EQ(zip->entries[0].data, TorchStateDictPickle(sample->tensors));
  for (size_t k = 0; k < sample->tensors.size(); ++k) {
    const testing::ZipEntry& e = zip->entries[k + 1];
    EXPECT_EQ(e.name, absl::StrCat("model/data/", k));
    EXPECT_EQ(e.data, std::string(reinterpret_cast<const char*>(sample->tensors[k].data.data()),
                                  4 * sample->tensors[k].data.size()));
  }
  EXPECT_EQ(zip->entries[sample->tensors.size() + 1].name, "model/version");
  EXPECT_EQ(zip->entries[sample->tensors.size() + 1].data, "3\n");
  EXPECT_EQ(zip->entries.back().name, "model/byteorder");
  EXPECT_EQ(zip->entries.back().data, "little");
  for (const testing::ZipEntry& e : zip->entries) EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
}

TEST(TorchFileTest, RefusalsWriteNothing) {
  const std::vector<float> six(6);
  std::ostringstream out;
  absl::Status s = WriteTorchStateDict({{"w", {2, 2}, six}}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("(4 elements) but 6 values"), absl::string_view::npos) << s;
  TorchFileOptions nested;
  nested.archive = "a/b";
  EXPECT_EQ(WriteTorchStateDict({{"w", {6}, six}}, &out, nested).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.str().empty());
}

constexpr char kLoad[] = R"py(
import collections, json, sys
import torch

path, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
sd = torch.load(path, map_location="cpu")
assert type(sd) is collections.OrderedDict, type(sd)
assert list(sd) == list(expected), (list(sd), list(expected))
for name, want in expected.items():
    t = sd[name]
    assert t.dtype == torch.float32 and t.device.type == "cpu", (name, t.dtype, t.device)
    assert list(t.shape) == want["shape"], (name, t.shape)
    assert t.is_contiguous() and t.stride() == torch.empty(want["shape"]).stride(), name
    assert not t.requires_grad
    assert t.numpy().tobytes().hex() == want["hex"], name
)py";

TEST(TorchFileTest, TorchLoadReadsEveryShapeBitwise) {
  if (!testing::HavePythonModule("torch")) GTEST_SKIP() << testing::kPython << " lacks torch";
  auto sample = testing::MakeSample();
  const std::string expected = testing::WriteExpected(sample->tensors, "torch_expected.json");
  const std::string empty = testing::WriteExpected({}, "torch_empty.json");
  for (bool zip64 : {false, true}) {
    TorchFileOptions options;
    options.force_zip64 = zip64;
    const std::string path = testing::TmpPath(absl::StrCat("sample", zip64, ".pt"));
    std::ofstream(path, std::ios::binary) << Write(sample->tensors, options);
    std::string out;
    EXPECT_EQ(testing::RunPython(kLoad, {path, expected}, &out), 0) << "zip64 " << zip64 << out;
  }
  const std::string path = testing::TmpPath("empty.pt");
  std::ofstream(path, std::ios::binary) << Write({});
  std::string out;
  EXPECT_EQ(testing::RunPython(kLoad, {path, empty}, &out), 0) << out;
}

}  // namespace
}  // namespace tessel::tensor_files
