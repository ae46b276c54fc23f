#include "client/tensor_files/torch_file.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/tensor_files/zip_writer.h"
#include "core/status_macros.h"

namespace tessel::tensor_files {
namespace {

// Pickle opcodes (Lib/pickle.py), protocols 0 to 2.
constexpr char kProto = '\x80';
constexpr char kGlobal = 'c';
constexpr char kMark = '(';
constexpr char kTuple = 't';
constexpr char kEmptyTuple = ')';
constexpr char kReduce = 'R';
constexpr char kBinPersId = 'Q';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kNewFalse = '\x89';
constexpr char kSetItems = 'u';
constexpr char kStop = '.';
constexpr int64_t kZipAlign = 64;

class Pickler {
 public:
  void Op(char op) { out_.push_back(op); }
  void Global(absl::string_view module, absl::string_view name) {
    absl::StrAppend(&out_, std::string(1, kGlobal), module, "\n", name, "\n");
  }
  void Str(absl::string_view s) {
    Op(kBinUnicode);
    Le(s.size(), 4);
    out_.append(s.data(), s.size());
  }
  void Int(int64_t v) {  // v >= 0 here
    if (v < 256) {
      Op(kBinInt1);
      Le(static_cast<uint64_t>(v), 1);
    } else if (v < 65536) {
      Op(kBinInt2);
      Le(static_cast<uint64_t>(v), 2);
    } else if (v <= 0x7fffffff) {
      Op(kBinInt);
      Le(static_cast<uint64_t>(v), 4);
    } else {
      // Two's complement, little-endian, as few bytes as keep the sign bit 0.
      int n = 0;
      for (uint64_t u = static_cast<uint64_t>(v); u != 0; u >>= 8) ++n;
      if ((static_cast<uint64_t>(v) >> (8 * n - 1)) & 1) ++n;
      Op(kLong1);
      Le(static_cast<uint64_t>(n), 1);
      Le(static_cast<uint64_t>(v), n);
    }
  }
  void IntTuple(const std::vector<int64_t>& values) {
    Op(kMark);
    for (int64_t v : values) Int(v);
    Op(kTuple);
  }
  // collections.OrderedDict(), left on the stack.
  void EmptyOrderedDict() {
    Global("collections", "OrderedDict");
    Op(kEmptyTuple);
    Op(kReduce);
  }
  std::string Take() { return std::move(out_); }

 private:
  void Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// torch's contiguous strides: each dimension's stride is the product of the
// later sizes, a size of 0 counting as 1.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> stride(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return stride;
}

}  // namespace

std::string TorchStateDictPickle(const std::vector<NamedTensor>& tensors) {
  Pickler p;
  p.Op(kProto);
  p.Op('\x02');
  p.EmptyOrderedDict();
  if (!tensors.empty()) {
    p.Op(kMark);
    for (size_t k = 0; k < tensors.size(); ++k) {
      const NamedTensor& t = tensors[k];
      p.Str(t.name);
      p.Global("torch._utils", "_rebuild_tensor_v2");
      p.Op(kMark);
      p.Op(kMark);  // the persistent id: the storage
      p.Str("storage");
      p.Global("torch", t.dtype->torch);
      p.Str(absl::StrCat(k));
      p.Str("cpu");
      p.Int(static_cast<int64_t>(Bytes(t).size() / t.dtype->itemsize));
      p.Op(kTuple);
      p.Op(kBinPersId);
      p.Int(0);  // storage offset
      p.IntTuple(t.shape);
      p.IntTuple(ContiguousStrides(t.shape));
      p.Op(kNewFalse);       // requires_grad
      p.EmptyOrderedDict();  // backward hooks
      p.Op(kTuple);
      p.Op(kReduce);
    }
    p.Op(kSetItems);
  }
  p.Op(kStop);
  return p.Take();
}

absl::Status WriteTorchStateDict(const std::vector<NamedTensor>& tensors, std::ostream* out,
                                 const TorchFileOptions& options) {
  TESSEL_RETURN_IF_ERROR(ValidateTensors(tensors));
  if (options.archive.empty() || options.archive.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the archive folder name '", options.archive, "' must be one path part"));
  }
  ZipWriter::Options zip_options;
  zip_options.align = kZipAlign;
  zip_options.force_zip64 = options.force_zip64;
  ZipWriter zip(out, zip_options);
  const std::string& a = options.archive;
  const std::string pickle = TorchStateDictPickle(tensors);
  TESSEL_RETURN_IF_ERROR(zip.Add(a + "/data.pkl", {pickle}));
  for (size_t k = 0; k < tensors.size(); ++k) {
    TESSEL_RETURN_IF_ERROR(zip.Add(absl::StrCat(a, "/data/", k), {Bytes(tensors[k])}));
  }
  TESSEL_RETURN_IF_ERROR(zip.Add(a + "/version", {"3\n"}));
  TESSEL_RETURN_IF_ERROR(zip.Add(a + "/byteorder", {"little"}));
  return zip.Finish();
}

}  // namespace tessel::tensor_files
