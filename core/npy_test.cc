#include "core/npy.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/python_run.h"

namespace tessel {
namespace {

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// A .npy file with an arbitrary header dict text, padded with spaces and a
// final '\n' so the data starts at a multiple of `align` (older numpy
// releases aligned to 16, current ones to 64).
std::string MakeNpy(const std::string& dict, const std::string& data, int align = 64,
                    char major = 1, char minor = 0) {
  std::string header = dict;
  while ((10 + header.size() + 1) % align != 0) header.push_back(' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(major);
  out.push_back(minor);
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  return out + header + data;
}

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  return v;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && FloatBytes(a) == FloatBytes(b);
}

// ---------------------------------------------------------------------------
// Round trip and writer layout.

TEST(NpyTest, RoundTripIsBitExact) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 100.0f);
  for (size_t n : {0, 1, 2, 3, 15, 16, 17, 37, 1000, 100003}) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    const std::vector<float> specials = {-0.0f,
                                         std::numeric_limits<float>::infinity(),
                                         -std::numeric_limits<float>::infinity(),
                                         std::numeric_limits<float>::denorm_min(),
                                         std::numeric_limits<float>::max(),
                                         std::numeric_limits<float>::quiet_NaN()};
    for (size_t i = 0; i < n && i < specials.size(); ++i) v[i] = specials[i];
    if (n > 6) {  // a NaN with a payload survives too
      const uint32_t bits = 0x7fc01234u;
      std::memcpy(&v[6], &bits, sizeof(bits));
    }
    const std::string path = TmpPath(absl::StrCat("roundtrip_", n, ".npy"));
    ASSERT_TRUE(WriteNpyF32(path, v).ok());
    absl::StatusOr<std::vector<float>> back = ReadNpyF32(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(BitwiseEqual(*back, v)) << "n=" << n;
  }
}

TEST(NpyTest, WriterLayoutIsNumpys) {
  for (size_t n : {0, 5, 12345}) {
    const std::string path = TmpPath("layout.npy");
    ASSERT_TRUE(WriteNpyF32(path, Ramp(n)).ok());
    const std::string bytes = ReadBytes(path);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                              static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8;
    const size_t data_offset = 10 + header_len;
    EXPECT_EQ(data_offset % 64, 0u);
    EXPECT_EQ(bytes.size(), data_offset + 4 * n);
    const std::string header = bytes.substr(10, header_len);
    const std::string dict =
        absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", n, ",), }");
    EXPECT_EQ(header.substr(0, dict.size()), dict);
    EXPECT_EQ(header.back(), '\n');
    EXPECT_EQ(header.find_first_not_of(' ', dict.size()), header.size() - 1) << "padding";
    EXPECT_EQ(bytes.substr(data_offset), FloatBytes(Ramp(n)));
  }
}

// Headers of other ranks, as numpy 1.24's np.save writes them (for .npz
// members): padding for the growth axis only when there is an axis.
TEST(NpyTest, HeadersOfAnyRankAreNumpys) {
  auto header = [](const std::string& shape, int spaces) {
    return absl::StrCat(std::string("\x93NUMPY\x01\x00v\x00", 10),
                        "{'descr': '<f4', 'fortran_order': False, 'shape': ", shape, ", }",
                        std::string(spaces, ' '), "\n");
  };
  EXPECT_EQ(NpyHeaderF32({}), header("()", 62));
  EXPECT_EQ(NpyHeaderF32({2, 3}), header("(2, 3)", 58));
  EXPECT_EQ(NpyHeaderF32({0}), header("(0,)", 60));
  EXPECT_EQ(NpyHeaderF32({1}), header("(1,)", 60));
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {7}, {12345678901}, {3, 4, 5, 6}, {0, 9}}) {
    EXPECT_EQ(NpyHeaderF32(shape).size() % 64, 0u);
  }
}

TEST(NpyTest, OverwritesAndLeavesNoTempFile) {
  const std::string path = TmpPath("overwrite.npy");
  ASSERT_TRUE(WriteNpyF32(path, Ramp(100)).ok());
  ASSERT_TRUE(WriteNpyF32(path, Ramp(3)).ok());
  absl::StatusOr<std::vector<float>> back = ReadNpyF32(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(BitwiseEqual(*back, Ramp(3)));
  struct stat st;
  EXPECT_NE(stat((path + ".tmp").c_str(), &st), 0) << "temporary file left behind";
}

TEST(NpyTest, WriteErrorNamesTheFile) {
  const std::string path = TmpPath("no/such/dir/x.npy");
  const absl::Status s = WriteNpyF32(path, Ramp(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(path), absl::string_view::npos) << s;
}

// ---------------------------------------------------------------------------
// Reader: accepted header spellings.

TEST(NpyTest, AcceptsEveryWayOfSpellingTheHeader) {
  const std::string data = FloatBytes(Ramp(3));
  const std::vector<std::string> dicts = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",  // numpy 1.x
      "{'descr':'<f4','fortran_order':False,'shape':(3,)}",
      "{\"shape\": (3, ), \"fortran_order\": False, \"descr\": \"<f4\"}",
      "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 3 , ) , }",
      "{'descr': '<f4',\n 'fortran_order': False,\t'shape': (3,)}",
  };
  int i = 0;
  for (const std::string& dict : dicts) {
    for (int align : {16, 64}) {
      const std::string path = TmpPath(absl::StrCat("variant_", i++, ".npy"));
      WriteBytes(path, MakeNpy(dict, data, align));
      absl::StatusOr<std::vector<float>> v = ReadNpyF32(path);
      ASSERT_TRUE(v.ok()) << dict << ": " << v.status();
      EXPECT_TRUE(BitwiseEqual(*v, Ramp(3))) << dict;
    }
  }
  // An empty array.
  const std::string path = TmpPath("empty_array.npy");
  WriteBytes(path, MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }", ""));
  absl::StatusOr<std::vector<float>> v = ReadNpyF32(path);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->empty());
}

// ---------------------------------------------------------------------------
// Reader: every rejection, with its code and message.

struct BadFile {
  std::string name;
  std::string bytes;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
};

std::string Dict(const std::string& descr, const std::string& fortran, const std::string& shape) {
  return absl::StrCat("{'descr': ", descr, ", 'fortran_order': ", fortran, ", 'shape': ", shape,
                      ", }");
}

std::vector<BadFile> BadFiles() {
  const std::string three = FloatBytes(Ramp(3));
  const std::string good = Dict("'<f4'", "False", "(3,)");
  using C = absl::StatusCode;
  std::string huge_header_len = MakeNpy(good, three);
  huge_header_len[8] = static_cast<char>(0xe8);  // 1000
  huge_header_len[9] = static_cast<char>(0x03);
  return {
      {"empty", "", C::kDataLoss, {"the file is empty"}},
      {"short_preamble",
       std::string("\x93NUMPY\x01", 7),
       C::kDataLoss,
       {"7 bytes, shorter than the 10-byte .npy preamble"}},
      {"bad_magic",
       "PK\x03\x04 this is a zip file",
       C::kInvalidArgument,
       {"not a .npy file", "PK\\x03\\x04", "\\x93NUMPY"}},
      {"text_file", "hello world, not numpy", C::kInvalidArgument, {"not a .npy file"}},
      {"version_2",
       MakeNpy(good, three, 64, 2, 0),
       C::kInvalidArgument,
       {"format version 2.0 is not supported", "expected NumPy format 1.0"}},
      {"version_3",
       MakeNpy(good, three, 64, 3, 0),
       C::kInvalidArgument,
       {"format version 3.0 is not supported"}},
      {"version_1_1",
       MakeNpy(good, three, 64, 1, 1),
       C::kInvalidArgument,
       {"format version 1.1 is not supported"}},
      {"float64",
       MakeNpy(Dict("'<f8'", "False", "(3,)"), three + three),
       C::kInvalidArgument,
       {"unsupported dtype '<f8'", "expected '<f4' (little-endian float32)", "astype"}},
      {"big_endian",
       MakeNpy(Dict("'>f4'", "False", "(3,)"), three),
       C::kInvalidArgument,
       {"unsupported dtype '>f4'", "big-endian"}},
      {"int32",
       MakeNpy(Dict("'<i4'", "False", "(3,)"), three),
       C::kInvalidArgument,
       {"unsupported dtype '<i4'"}},
      {"uint8",
       MakeNpy(Dict("'|u1'", "False", "(12,)"), three),
       C::kInvalidArgument,
       {"unsupported dtype '|u1'"}},
      {"structured",
       MakeNpy(Dict("[('a', '<f4')]", "False", "(3,)"), three),
       C::kInvalidArgument,
       {"malformed header dict", "expected an integer"}},
      {"fortran",
       MakeNpy(Dict("'<f4'", "True", "(3,)"), three),
       C::kInvalidArgument,
       {"fortran_order is True; expected False"}},
      {"fortran_not_bool",
       MakeNpy(Dict("'<f4'", "0", "(3,)"), three),
       C::kInvalidArgument,
       {"fortran_order is 0; expected False"}},
      {"two_d",
       MakeNpy(Dict("'<f4'", "False", "(1, 3)"), three),
       C::kInvalidArgument,
       {"shape (1, 3) is 2-D; expected a 1-D shape (N,)"}},
      {"scalar",
       MakeNpy(Dict("'<f4'", "False", "()"), three.substr(0, 4)),
       C::kInvalidArgument,
       {"shape () is 0-D"}},
      {"shape_not_tuple",
       MakeNpy(Dict("'<f4'", "False", "(3)"), three),
       C::kInvalidArgument,
       {"shape (3) is not a tuple"}},
      {"shape_list",
       MakeNpy(Dict("'<f4'", "False", "[3]"), three),
       C::kInvalidArgument,
       {"shape [3] is not a tuple"}},
      {"negative_dim",
       MakeNpy(Dict("'<f4'", "False", "(-3,)"), three),
       C::kInvalidArgument,
       {"negative dimension"}},
      {"missing_key",
       MakeNpy("{'descr': '<f4', 'fortran_order': False}", three),
       C::kInvalidArgument,
       {"the header has no 'shape' key"}},
      {"extra_key",
       MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", three),
       C::kInvalidArgument,
       {"unexpected header key 'extra'"}},
      {"duplicate_key",
       MakeNpy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", three),
       C::kInvalidArgument,
       {"duplicate key 'descr'"}},
      {"garbage_after_dict",
       MakeNpy(good + " xyz", three),
       C::kInvalidArgument,
       {"unexpected text after the closing '}'"}},
      {"unterminated_string",
       MakeNpy("{'descr: '<f4'", three),
       C::kInvalidArgument,
       {"malformed header dict"}},
      {"not_a_dict",
       MakeNpy("['descr', '<f4']", three),
       C::kInvalidArgument,
       {"does not start with '{'"}},
      {"header_beyond_file",
       huge_header_len,
       C::kDataLoss,
       {"header length field says 1000 bytes, but only"}},
      {"truncated_data",
       MakeNpy(good, three.substr(0, 11)),
       C::kDataLoss,
       {"truncated: shape (3,) needs 3 float32 values", "only 11 bytes follow"}},
      {"huge_shape",
       MakeNpy(Dict("'<f4'", "False", "(9223372036854775807,)"), three),
       C::kDataLoss,
       {"truncated"}},
      {"trailing_garbage",
       MakeNpy(good, three + "xy"),
       C::kDataLoss,
       {"2 unexpected trailing bytes after the 3 float32 values"}},
  };
}

TEST(NpyTest, RejectsEverythingElseWithClearMessages) {
  for (const BadFile& b : BadFiles()) {
    SCOPED_TRACE(b.name);
    const std::string path = TmpPath(absl::StrCat("bad_", b.name, ".npy"));
    WriteBytes(path, b.bytes);
    absl::StatusOr<std::vector<float>> v = ReadNpyF32(path);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), b.code) << v.status();
    const std::string message(v.status().message());
    EXPECT_NE(message.find("cannot read .npy file " + path + ": "), std::string::npos) << message;
    for (const std::string& part : b.message_parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message \"" << message << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(NpyTest, RejectsMissingFilesAndDirectories) {
  const std::string missing = TmpPath("does_not_exist.npy");
  absl::StatusOr<std::vector<float>> v = ReadNpyF32(missing);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound) << v.status();
  EXPECT_NE(v.status().message().find(missing), absl::string_view::npos) << v.status();

  const std::string dir = TmpPath("a_directory.npy");
  mkdir(dir.c_str(), 0755);
  v = ReadNpyF32(dir);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_NE(v.status().message().find("not a regular file"), absl::string_view::npos) << v.status();
}

// ---------------------------------------------------------------------------
// Interoperability with real numpy (skipped when /usr/bin/python3 lacks it).

// Modes: check PATH N (assert PATH holds Ramp(N)), save PATH N (np.save
// Ramp(N)), save_f64 / save_2d PATH (files we must reject).
constexpr char kInteropScript[] = R"py(
import sys
import numpy as np

mode, path = sys.argv[1], sys.argv[2]
def ramp(n):
    return np.arange(n, dtype=np.float32) * np.float32(0.25) - np.float32(3)

if mode == "check":
    n = int(sys.argv[3])
    a = np.load(path)
    assert a.dtype == np.dtype("<f4"), a.dtype
    assert a.shape == (n,), a.shape
    assert a.tobytes() == ramp(n).tobytes(), "values differ"
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        assert version == (1, 0), version
elif mode == "save":
    np.save(path, ramp(int(sys.argv[3])))
elif mode == "save_f64":
    np.save(path, ramp(5).astype(np.float64))
elif mode == "save_2d":
    np.save(path, ramp(6).reshape(2, 3))
elif mode == "save_fortran":
    np.save(path, np.asfortranarray(ramp(6).reshape(2, 3)))
else:
    sys.exit("unknown mode " + mode)
)py";

class NpyNumpyInteropTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!HavePythonModule("numpy")) GTEST_SKIP() << kPython << " cannot import numpy";
  }
  void Python(const std::vector<std::string>& args) {
    std::string out;
    ASSERT_EQ(RunPython(kInteropScript, args, &out), 0) << out;
  }
};

TEST_F(NpyNumpyInteropTest, NumpyLoadsWhatWeWrite) {
  for (size_t n : {0, 1, 37, 100000}) {
    const std::string path = TmpPath(absl::StrCat("ours_", n, ".npy"));
    ASSERT_TRUE(WriteNpyF32(path, Ramp(n)).ok());
    Python({"check", path, absl::StrCat(n)});
  }
}

TEST_F(NpyNumpyInteropTest, WeReadWhatNumpySavesAndWriteTheSameBytes) {
  for (size_t n : {0, 1, 37, 100000}) {
    const std::string theirs = TmpPath(absl::StrCat("numpy_", n, ".npy"));
    Python({"save", theirs, absl::StrCat(n)});
    absl::StatusOr<std::vector<float>> v = ReadNpyF32(theirs);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(BitwiseEqual(*v, Ramp(n))) << "n=" << n;

    const std::string ours = TmpPath(absl::StrCat("ours_same_", n, ".npy"));
    ASSERT_TRUE(WriteNpyF32(ours, Ramp(n)).ok());
    EXPECT_EQ(ReadBytes(ours), ReadBytes(theirs)) << "n=" << n;
  }
}

TEST_F(NpyNumpyInteropTest, RejectsOtherNumpyArrays) {
  const struct {
    const char* mode;
    const char* message;
  } cases[] = {{"save_f64", "unsupported dtype '<f8'"},
               {"save_2d", "shape (2, 3) is 2-D"},
               {"save_fortran", "fortran_order is True"}};
  for (const auto& c : cases) {
    const std::string path = TmpPath(absl::StrCat(c.mode, ".npy"));
    Python({c.mode, path});
    absl::StatusOr<std::vector<float>> v = ReadNpyF32(path);
    ASSERT_FALSE(v.ok()) << c.mode;
    EXPECT_NE(v.status().message().find(c.message), absl::string_view::npos) << v.status();
  }
}

}  // namespace
}  // namespace tessel
