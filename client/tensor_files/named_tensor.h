// A model's tensors as the file writers of this folder take them: a name, a
// shape and float32 values in C (row-major) order, borrowed from the caller.
// The writers (safetensors.h, torch_file.h, npz.h) each put such a list into
// one file that a library of that format's world reads back as name ->
// float32 tensor of that shape.
//
// Contract: ValidateTensors accepts a list when every name is non-empty,
// valid UTF-8 without NUL, and unique; every dimension is >= 0; and each
// tensor's element count (the product of its shape; 1 for the shape [] of a
// 0-d tensor) equals data.size(). It names every problem it finds, sorted.
// The writers call it first and write nothing when it fails.
//
// Example:
//   std::vector<float> w(6), b(2);
//   std::vector<NamedTensor> t = {{"fc.weight", {2, 3}, w}, {"fc.bias", {2}, b}};
//   TESSEL_RETURN_IF_ERROR(ValidateTensors(t));
#ifndef TESSEL_CLIENT_TENSOR_FILES_NAMED_TENSOR_H_
#define TESSEL_CLIENT_TENSOR_FILES_NAMED_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the tensor file writers copy host floats as little-endian float32");

namespace tessel::tensor_files {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;    // [] is a 0-d tensor (one element)
  absl::Span<const float> data;  // not owned; must outlive the write
};

// Elements of `shape` (1 for []); -1 if a dimension is negative or the
// product overflows int64.
int64_t NumElements(const std::vector<int64_t>& shape);

// InvalidArgument naming every problem (see the file comment).
absl::Status ValidateTensors(const std::vector<NamedTensor>& tensors);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_NAMED_TENSOR_H_
