// WriteTorchStateDict: tensors as the file torch.save(state_dict) writes, so
// torch.load (torch >= 1.6, the zip format; checked with 1.13) returns an
// OrderedDict name -> contiguous float32 CPU tensor of that shape, in the
// order given. Written without torch:
//
//   a zip archive (zip_writer.h, stored entries whose data start at multiples
//   of 64 bytes, as torch.save pads them) holding
//     ARCHIVE/data.pkl    pickle protocol 2 of
//                         OrderedDict([(name, torch._utils._rebuild_tensor_v2(
//                             persistent_id(("storage", torch.FloatStorage,
//                                            "K", "cpu", numel)),
//                             0, shape, contiguous strides, False,
//                             OrderedDict())), ...])
//     ARCHIVE/data/K      tensor K's values, float32 little-endian (K = 0, 1, ...)
//     ARCHIVE/version     "3\n"
//     ARCHIVE/byteorder   "little" (torch >= 2.1 writes it; older readers skip it)
//
// Strides are torch's contiguous ones (a dimension of size 0 counts as 1),
// and a 0-d tensor (shape []) has shape () and stride (). The pickle uses no
// memo and only opcodes of protocols 0 to 2.
//
// Contract: ValidateTensors (named_tensor.h) passes, else InvalidArgument and
// nothing is written; a stream error is DataLoss.
//
// Example:
//   std::ofstream f(path, std::ios::binary);
//   absl::Status s = WriteTorchStateDict(tensors, &f);
#ifndef TESSEL_CLIENT_TENSOR_FILES_TORCH_FILE_H_
#define TESSEL_CLIENT_TENSOR_FILES_TORCH_FILE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/tensor_files/named_tensor.h"

namespace tessel::tensor_files {

struct TorchFileOptions {
  std::string archive = "archive";  // the folder every entry is under
  bool force_zip64 = false;         // tests: the zip64 records without 4 GiB
};

absl::Status WriteTorchStateDict(const std::vector<NamedTensor>& tensors, std::ostream* out,
                                 const TorchFileOptions& options = {});

// The data.pkl above, alone (for tests).
std::string TorchStateDictPickle(const std::vector<NamedTensor>& tensors);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_TORCH_FILE_H_
