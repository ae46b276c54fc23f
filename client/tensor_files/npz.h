// WriteNpz: tensors as numpy's .npz (np.savez): a zip archive (zip_writer.h,
// stored entries) with one member NAME.npy per tensor, in the order given,
// each a .npy file of format 1.0 with dtype '<f4', fortran_order False and
// the tensor's shape (core/npy.h NpyHeaderF32), so np.load(path)[NAME] is a
// float32 array of that shape (a 0-d array for shape []).
//
// Contract: ValidateTensors (named_tensor.h) passes, else InvalidArgument and
// nothing is written; a stream error is DataLoss. Names are zip paths: a '/'
// in a name makes a folder inside the archive, and np.load's keys keep it.
//
// Example:
//   std::ofstream f(path, std::ios::binary);
//   absl::Status s = WriteNpz(tensors, &f);
#ifndef TESSEL_CLIENT_TENSOR_FILES_NPZ_H_
#define TESSEL_CLIENT_TENSOR_FILES_NPZ_H_

#include <ostream>
#include <vector>

#include "absl/status/status.h"
#include "client/tensor_files/named_tensor.h"

namespace tessel::tensor_files {

absl::Status WriteNpz(const std::vector<NamedTensor>& tensors, std::ostream* out,
                      bool force_zip64 = false);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_NPZ_H_
