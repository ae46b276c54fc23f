// Tensors of other dtypes than float32 (a model's buffers: int64
// num_batches_tracked, float64, float16, bool, uint8): each writer records the
// dtype and the bytes, and torch.load, np.load and a reader of the safetensors
// header read them back with that dtype, bitwise. A byte count that does not
// match the shape, and bfloat16 in an npz (numpy has no such type), are
// refused with nothing written.
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/tensor_files/named_tensor.h"
#include "client/tensor_files/npz.h"
#include "client/tensor_files/safetensors.h"
#include "client/tensor_files/testing.h"
#include "client/tensor_files/torch_file.h"
#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

struct Mixed {
  std::vector<float> f32 = {1.5f, -2.0f};
  std::string i64 = std::string("\x07\x00\x00\x00\x00\x01\x00\x00", 8);  // 2**40 + 7
  std::string f64 =
      std::string("\x00\x00\x00\x00\x00\x00\xf0\x3f\x00\x00\x00\x00\x00\x00\x00\xc0", 16);
  std::string b = std::string("\x01\x00\x01", 3);
  std::string u8 = std::string("\xff", 1);
  std::string f16 = std::string("\x00\x3c\x00\x40", 4);  // 1.0, 2.0
  std::vector<NamedTensor> tensors;
  Mixed() {
    tensors.push_back({"w", {2}, f32});
    auto add = [&](const char* name, std::vector<int64_t> shape, const char* dtype,
                   const std::string& bytes) {
      NamedTensor t{name, std::move(shape), {}};
      t.dtype = FindDType(dtype);
      t.bytes = bytes;
      tensors.push_back(t);
    };
    add("bn.num_batches_tracked", {}, "int64", i64);
    add("d", {1, 2}, "float64", f64);
    add("mask", {3}, "bool", b);
    add("u", {1}, "uint8", u8);
    add("h", {2}, "float16", f16);
  }
};

// name -> (dtype, shape, hex) as each reader sees it, printed one per line.
constexpr char kExpected[] =
    "w float32 [2] 0000c03f000000c0\n"
    "bn.num_batches_tracked int64 [] 0700000000010000\n"
    "d float64 [1, 2] 000000000000f03f00000000000000c0\n"
    "mask bool [3] 010001\n"
    "u uint8 [1] ff\n"
    "h float16 [2] 003c0040\n";

constexpr char kTorch[] = R"py(
import sys, torch
sd = torch.load(sys.argv[1])
for k, v in sd.items():
    print(k, str(v.dtype).replace("torch.", ""), list(v.shape),
          v.contiguous().view(torch.uint8).numpy().tobytes().hex() if v.dim() else
          v.reshape(1).view(torch.uint8).numpy().tobytes().hex())
)py";

constexpr char kNumpy[] = R"py(
import sys, numpy as np
with np.load(sys.argv[1]) as z:
    for k in z.files:
        a = z[k]
        print(k, str(a.dtype), list(a.shape), a.tobytes().hex())
)py";

constexpr char kSafetensors[] = R"py(
import sys, json, struct
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
names = {"F32": "float32", "I64": "int64", "F64": "float64", "BOOL": "bool", "U8": "uint8",
         "F16": "float16"}
for k, info in header.items():
    b, e = info["data_offsets"]
    print(k, names[info["dtype"]], info["shape"], raw[8 + n + b:8 + n + e].hex())
)py";

TEST(DTypesTest, EveryWriterKeepsTheDtypeAndTheBytes) {
  if (!testing::HavePythonModule("torch")) GTEST_SKIP() << testing::kPython << " lacks torch";
  Mixed m;
  ASSERT_TRUE(ValidateTensors(m.tensors).ok()) << ValidateTensors(m.tensors);
  struct Case {
    const char* file;
    const char* script;
    std::function<absl::Status(std::ostream*)> write;
  };
  const std::vector<Case> cases = {
      {"mixed.pt", kTorch, [&](std::ostream* o) { return WriteTorchStateDict(m.tensors, o); }},
      {"mixed.npz", kNumpy, [&](std::ostream* o) { return WriteNpz(m.tensors, o); }},
      {"mixed.safetensors", kSafetensors,
       [&](std::ostream* o) { return WriteSafetensors(m.tensors, {}, o); }},
  };
  for (const Case& c : cases) {
    std::ostringstream bytes;
    ASSERT_TRUE(c.write(&bytes).ok()) << c.file;
    const std::string path = testing::TmpPath(c.file);
    std::ofstream(path, std::ios::binary) << bytes.str();
    std::string out;
    ASSERT_EQ(testing::RunPython(c.script, {path}, &out), 0) << c.file << out;
    EXPECT_EQ(out, kExpected) << c.file;
  }
}

TEST(DTypesTest, WrongByteCountsAndBfloat16InNpzAreRefused) {
  const std::string three("\0\0\0", 3);
  NamedTensor t{"n", {}, {}};
  t.dtype = FindDType("int64");
  t.bytes = three;
  const absl::Status s = ValidateTensors({t});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'n' (int64) has shape [] (1 elements) but 3 bytes"),
            std::string::npos)
      << s;
  std::ostringstream out;
  EXPECT_FALSE(WriteTorchStateDict({t}, &out).ok());
  EXPECT_TRUE(out.str().empty());

  const std::string two("\x80\x3f", 2);
  NamedTensor bf{"b", {1}, {}};
  bf.dtype = FindDType("bfloat16");
  bf.bytes = two;
  std::ostringstream npz;
  const absl::Status refused = WriteNpz({bf}, &npz);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("bfloat16, which numpy (npz) has no type for"),
            std::string::npos)
      << refused;
  EXPECT_TRUE(npz.str().empty());
  EXPECT_EQ(FindDType("complex64"), nullptr);
  EXPECT_EQ(FindDType("float32"), FindDType("float32"));
}

}  // namespace
}  // namespace tessel::tensor_files
