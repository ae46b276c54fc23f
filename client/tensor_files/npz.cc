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
    const std::string header = NpyHeaderF32(t.shape);
    const absl::string_view data(reinterpret_cast<const char*>(t.data.data()),
                                 t.data.size() * sizeof(float));
    TESSEL_RETURN_IF_ERROR(zip.Add(absl::StrCat(t.name, ".npy"), {header, data}));
  }
  return zip.Finish();
}

}  // namespace tessel::tensor_files
