// WriteSafetensors: tensors as a .safetensors file, written from the
// format's published description (huggingface/safetensors), no library:
//
//   8 bytes   N, the header's length, unsigned little-endian
//   N bytes   a JSON object: "__metadata__": {string: string, ...} first, then
//             one member per tensor in the order given,
//             "NAME": {"dtype": "F32", "shape": [...], "data_offsets": [B, E]}
//             with B and E byte offsets into the data section; padded with
//             spaces so the data starts at a multiple of 8
//   data      the tensors' float32 values, little-endian, back to back in the
//             order given (so the offsets tile the section, as readers check)
//
// Contract: ValidateTensors (named_tensor.h) passes, no tensor is named
// "__metadata__", and metadata keys are unique; else InvalidArgument and
// nothing is written. A stream error is DataLoss (the caller discards the
// partial file).
//
// Example:
//   std::ofstream f(path, std::ios::binary);
//   absl::Status s = WriteSafetensors(tensors, {{"format", "pt"}}, &f);
#ifndef TESSEL_CLIENT_TENSOR_FILES_SAFETENSORS_H_
#define TESSEL_CLIENT_TENSOR_FILES_SAFETENSORS_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/tensor_files/named_tensor.h"

namespace tessel::tensor_files {

using Metadata = std::vector<std::pair<std::string, std::string>>;

absl::Status WriteSafetensors(const std::vector<NamedTensor>& tensors, const Metadata& metadata,
                              std::ostream* out);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_SAFETENSORS_H_
