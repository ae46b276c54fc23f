#include "client/tensor_files/npz.h"

#include "absl/strings/str_cat.h"
#include "client/tensor_files/zip_writer.h"
#include "core/npy.h"
#include "core/status_macros.h"

namespace tessel::tensor_files {

absl::Status WriteNpz(const std::vector<NamedTensor>& tensors, std::ostream* out,
                      bool force_zip64) {
  TESSEL_RETURN_IF_ERROR(ValidateTensors(tensors));
  ZipWriter::Options options;
  options.force_zip64 = force_zip64;
  ZipWriter zip(out, options);
  for (const NamedTensor& t : tensors) {
    if (*t.dtype->npy == '\0') {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is ", t.dtype->name,
                                                     ", which numpy (npz) has no type for"));
    }
  }
  for (const NamedTensor& t : tensors) {
    const std::string header = NpyHeader(t.dtype->npy, t.shape);
    const absl::string_view data = Bytes(t);
    TESSEL_RETURN_IF_ERROR(zip.Add(absl::StrCat(t.name, ".npy"), {header, data}));
  }
  return zip.Finish();
}

}  // namespace tessel::tensor_files
