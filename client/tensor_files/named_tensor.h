// A model's tensors as the file writers of this folder take them: a name, a
// shape and float32 values in C (row-major) order (or another DType's bytes:
// a model's buffers), borrowed from the caller.
// The writers (safetensors.h, torch_file.h, npz.h) each put such a list into
// one file that a library of that format's world reads back as name ->
// float32 tensor of that shape.
//
// Contract: ValidateTensors accepts a list when every name is non-empty,
// valid UTF-8 without NUL, and unique; every dimension is >= 0; and each
// tensor's element count (the product of its shape; 1 for the shape [] of a
// 0-d tensor) equals data.size() (another dtype: bytes.size() is that times
// its itemsize). It names every problem it finds, sorted.
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
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the tensor file writers copy host floats as little-endian float32");

namespace tessel::tensor_files {

// The element types a file may hold (a model's buffers: int64
// num_batches_tracked, float64, ...), each format's name for it, and its size.
// numpy has no bfloat16: an npz refuses it (npy == "").
struct DType {
  const char* name;         // "float32", "int64", ... (tessel.torch's names)
  const char* safetensors;  // "F32", "I64", ...
  const char* npy;          // numpy's descr: "<f4", "<i8", "|b1", ...
  const char* torch;        // the storage class: "FloatStorage", ...
  int itemsize;
};
inline constexpr DType kFloat32 = {"float32", "F32", "<f4", "FloatStorage", 4};
// kFloat32 first, then the others; nullptr if `name` is none of them.
const DType* FindDType(const std::string& name);

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;    // [] is a 0-d tensor (one element)
  absl::Span<const float> data;  // float32 values; not owned; must outlive the write
  // Another dtype: its little-endian elements in `bytes` (not owned), `data`
  // empty. The writers take Bytes(t) either way.
  const DType* dtype = &kFloat32;
  absl::string_view bytes = {};
};

// The tensor's elements as bytes (`data`'s for float32).
absl::string_view Bytes(const NamedTensor& t);

// Elements of `shape` (1 for []); -1 if a dimension is negative or the
// product overflows int64.
int64_t NumElements(const std::vector<int64_t>& shape);

// InvalidArgument naming every problem (see the file comment).
absl::Status ValidateTensors(const std::vector<NamedTensor>& tensors);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_NAMED_TENSOR_H_
