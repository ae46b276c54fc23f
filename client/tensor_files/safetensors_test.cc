// WriteSafetensors: the published layout byte by byte, 0-d beside [1],
// refusals that write nothing, and a reader written in Python from the
// format's description reads every value back bitwise.
#include "client/tensor_files/safetensors.h"

#include <fstream>
#include <sstream>

#include "client/tensor_files/testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessel::tensor_files {
namespace {

using json = nlohmann::ordered_json;

std::string Write(const std::vector<NamedTensor>& tensors, const Metadata& metadata) {
  std::ostringstream out;
  const absl::Status s = WriteSafetensors(tensors, metadata, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out.str();
}

TEST(SafetensorsTest, LayoutIsThePublishedOne) {
  auto sample = testing::MakeSample();
  const std::string file = Write(sample->tensors, {{"format", "pt"}, {"tessel.step", "40"}});
  ASSERT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  ASSERT_LE(8 + n, file.size());
  EXPECT_EQ(n % 8, 0u) << "the data section starts at a multiple of 8";
  const std::string text = file.substr(8, n);
  EXPECT_EQ(text.front(), '{');
  const size_t close = text.rfind('}');
  EXPECT_EQ(text.find_first_not_of(' ', close + 1), std::string::npos) << "padding is spaces";
  const json header = json::parse(text);
  // __metadata__ first, then the tensors in the order given.
  auto it = header.begin();
  EXPECT_EQ(it.key(), "__metadata__");
  EXPECT_EQ(it.value(), json({{"format", "pt"}, {"tessel.step", "40"}}));
  uint64_t offset = 0;
  for (const NamedTensor& t : sample->tensors) {
    ++it;
    ASSERT_NE(it, header.end());
    EXPECT_EQ(it.key(), t.name);
    EXPECT_EQ(it.value()["dtype"], "F32");
    EXPECT_EQ(it.value()["shape"].get<std::vector<int64_t>>(), t.shape);
    const auto offsets = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    EXPECT_EQ(offsets[0], offset) << "tensors tile the data section";
    EXPECT_EQ(offsets[1], offset + 4 * t.data.size());
    EXPECT_EQ(file.substr(8 + n + offset, 4 * t.data.size()),
              std::string(reinterpret_cast<const char*>(t.data.data()), 4 * t.data.size()));
    offset = offsets[1];
  }
  EXPECT_EQ(8 + n + offset, file.size()) << "nothing after the data";
}

// tessel.torch registers a 0-d parameter as [1]; the writer keeps whichever
// shape it is given: [] stays a 0-d tensor, [1] a 1-element vector.
TEST(SafetensorsTest, ZeroDimAndOneElementShapesStayApart) {
  const std::vector<float> v = {2.5f}, w = {-1.f};
  const std::string file = Write({{"scalar", {}, v}, {"vector", {1}, w}}, {});
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  const json header = json::parse(file.substr(8, n));
  EXPECT_FALSE(header.contains("__metadata__")) << "no metadata given, none written";
  EXPECT_EQ(header["scalar"]["shape"], json::array());
  EXPECT_EQ(header["vector"]["shape"], json::array({1}));
  EXPECT_EQ(file.size(), 8 + n + 8);
}

TEST(SafetensorsTest, RefusalsWriteNothing) {
  const std::vector<float> six(6);
  const struct {
    std::vector<NamedTensor> tensors;
    Metadata metadata;
    const char* message;
  } cases[] = {
      {{{"w", {2, 3}, six}, {"w", {6}, six}}, {}, "tensor name 'w' appears more than once"},
      {{{"w", {2, 2}, six}}, {}, "shape [2, 2] (4 elements) but 6 values"},
      {{{"__metadata__", {6}, six}}, {}, "may not be named '__metadata__'"},
      {{{"w", {6}, six}}, {{"k", "a"}, {"k", "b"}}, "metadata key 'k' appears twice"},
  };
  for (const auto& c : cases) {
    std::ostringstream out;
    const absl::Status s = WriteSafetensors(c.tensors, c.metadata, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
    EXPECT_TRUE(out.str().empty()) << c.message;
  }
  std::ostringstream broken;
  broken.setstate(std::ios::badbit);
  EXPECT_EQ(WriteSafetensors({{"w", {6}, six}}, {}, &broken).code(), absl::StatusCode::kDataLoss);
}

// A reader written from the format's description alone (no safetensors
// package), as a user without the library would write one.
constexpr char kReader[] = R"py(
import json, struct, sys
import numpy as np

path, expected_path = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n].decode("utf-8"))
data = raw[8 + n:]
meta = header.pop("__metadata__")
assert meta == {"format": "pt", "tessel.step": "40"}, meta
expected = json.load(open(expected_path))
assert list(header) == list(expected), (list(header), list(expected))
for name, info in header.items():
    assert info["dtype"] == "F32", info
    b, e = info["data_offsets"]
    a = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
    assert list(a.shape) == expected[name]["shape"], (name, a.shape)
    assert a.tobytes().hex() == expected[name]["hex"], name
)py";

TEST(SafetensorsTest, AReaderWrittenFromTheFormatReadsItBitwise) {
  if (!testing::HavePythonModule("numpy")) GTEST_SKIP() << testing::kPython << " lacks numpy";
  auto sample = testing::MakeSample();
  const std::string path = testing::TmpPath("sample.safetensors");
  std::ofstream(path, std::ios::binary)
      << Write(sample->tensors, {{"format", "pt"}, {"tessel.step", "40"}});
  std::string out;
  EXPECT_EQ(testing::RunPython(
                kReader, {path, testing::WriteExpected(sample->tensors, "expected.json")}, &out),
            0)
      << out;
}

}  // namespace
}  // namespace tessel::tensor_files
