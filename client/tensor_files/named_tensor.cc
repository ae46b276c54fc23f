#include "client/tensor_files/named_tensor.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessel::tensor_files {
namespace {

// Well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF) and no NUL: what JSON, pickle and zip names all carry.
bool IsNameText(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    static constexpr unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

constexpr DType kDTypes[] = {
    kFloat32,
    {"float64", "F64", "<f8", "DoubleStorage", 8},
    {"float16", "F16", "<f2", "HalfStorage", 2},
    {"bfloat16", "BF16", "", "BFloat16Storage", 2},
    {"int64", "I64", "<i8", "LongStorage", 8},
    {"int32", "I32", "<i4", "IntStorage", 4},
    {"int16", "I16", "<i2", "ShortStorage", 2},
    {"int8", "I8", "|i1", "CharStorage", 1},
    {"uint8", "U8", "|u1", "ByteStorage", 1},
    {"bool", "BOOL", "|b1", "BoolStorage", 1},
};

}  // namespace

const DType* FindDType(const std::string& name) {
  for (const DType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

absl::string_view Bytes(const NamedTensor& t) {
  if (t.dtype == nullptr || std::string(t.dtype->name) == kFloat32.name) {
    return absl::string_view(reinterpret_cast<const char*>(t.data.data()),
                             t.data.size() * sizeof(float));
  }
  return t.bytes;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

absl::Status ValidateTensors(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> problems;
  std::set<std::string> seen, duplicates;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty()) {
      problems.push_back("a tensor has an empty name");
    } else if (!IsNameText(t.name)) {
      problems.push_back(
          absl::StrCat("tensor name '", absl::CEscape(t.name), "' is not UTF-8 text without NUL"));
    }
    if (!seen.insert(t.name).second) duplicates.insert(t.name);
    const int64_t n = NumElements(t.shape);
    if (n < 0) {
      problems.push_back(absl::StrCat("tensor '", t.name, "' has shape ", ShapeText(t.shape),
                                      ": a dimension is negative or the size overflows"));
    } else if (t.dtype == nullptr) {
      problems.push_back(absl::StrCat("tensor '", t.name, "' has no dtype"));
    } else if (std::string(t.dtype->name) == kFloat32.name) {
      if (static_cast<uint64_t>(n) != t.data.size()) {
        problems.push_back(absl::StrCat("tensor '", t.name, "' has shape ", ShapeText(t.shape),
                                        " (", n, " elements) but ", t.data.size(), " values"));
      }
    } else if (!t.data.empty() || static_cast<uint64_t>(n) * t.dtype->itemsize != t.bytes.size()) {
      problems.push_back(absl::StrCat("tensor '", t.name, "' (", t.dtype->name, ") has shape ",
                                      ShapeText(t.shape), " (", n, " elements) but ",
                                      t.bytes.size(), " bytes"));
    }
  }
  for (const std::string& d : duplicates) {
    problems.push_back(absl::StrCat("tensor name '", d, "' appears more than once"));
  }
  if (problems.empty()) return absl::OkStatus();
  std::sort(problems.begin(), problems.end());
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

}  // namespace tessel::tensor_files
