// What the examples write their final parameters with: a 1-D float32 .npy
// file (numpy.load reads it). Self-contained: the examples use the worker SDK
// alone.
//
// Example:
//   if (absl::Status s = examples::WriteNpy("/tmp/final.npy", worker.params()); !s.ok()) ...
#ifndef TESSEL_EXAMPLES_NPY_OUT_H_
#define TESSEL_EXAMPLES_NPY_OUT_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace examples {

inline absl::Status WriteNpy(const std::string& path, absl::Span<const float> v) {
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", v.size(), ",), }");
  header.append(63 - (10 + header.size()) % 64, ' ').push_back('\n');  // 64-byte aligned
  const char magic[] = {'\x93',
                        'N',
                        'U',
                        'M',
                        'P',
                        'Y',
                        1,
                        0,
                        static_cast<char>(header.size()),
                        static_cast<char>(header.size() >> 8)};
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot write --out=", path));
  bool ok = std::fwrite(magic, 1, sizeof(magic), f) == sizeof(magic) &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(v.data(), sizeof(float), v.size(), f) == v.size();
  ok = std::fclose(f) == 0 && ok;
  return ok ? absl::OkStatus() : absl::DataLossError(absl::StrCat("error writing --out=", path));
}

}  // namespace examples

#endif  // TESSEL_EXAMPLES_NPY_OUT_H_
