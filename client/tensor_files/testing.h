// What the tensor-file tests share: a temporary path, Debian's python3 run on
// a snippet (the real readers: torch.load, np.load), and a small zip reader
// written from the zip specification (APPNOTE.TXT) that checks what the
// writers promise: CRC-32s, sizes, offsets, alignment, zip64 records.
#ifndef TESSEL_CLIENT_TENSOR_FILES_TESTING_H_
#define TESSEL_CLIENT_TENSOR_FILES_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/tensor_files/named_tensor.h"
#include "testing/python_run.h"

namespace tessel::tensor_files::testing {

// $TEST_TMPDIR/name (or /tmp/name).
std::string TmpPath(const std::string& name);
std::string ReadFile(const std::string& path);

// Python's own readers: testing/python_run.h.
using ::tessel::HavePythonModule;
using ::tessel::kPython;
using ::tessel::RunPython;

// The tensors every writer test writes: 0-d ([]) beside [1], empty ones,
// 2-D, one of 2100 elements, -0, infinities, a NaN with a payload, a
// denormal, and a non-ASCII name. `tensors` borrow `values`.
struct Sample {
  std::vector<std::vector<float>> values;
  std::vector<NamedTensor> tensors;
};
// Returned through a pointer: `tensors` point into `values`.
std::unique_ptr<Sample> MakeSample();
// `tensors` as JSON {name: {"shape": [...], "hex": the float32 bytes}, ...}
// in a file, for a Python check to compare what it reads against.
std::string WriteExpected(const std::vector<NamedTensor>& tensors, const std::string& name);

struct ZipEntry {
  std::string name;
  std::string data;
  uint64_t data_offset = 0;  // from the start of the archive
  uint16_t flags = 0;
  bool zip64 = false;  // the central header carries a zip64 extra field
};
struct ZipArchive {
  std::vector<ZipEntry> entries;  // central directory order
  bool zip64_end = false;         // a zip64 end record and locator precede the end record
};
// Parses a whole archive of stored entries, checking every entry's local
// header against its central one and its CRC-32; an error says what is wrong.
absl::StatusOr<ZipArchive> ReadZip(const std::string& bytes);

}  // namespace tessel::tensor_files::testing

#endif  // TESSEL_CLIENT_TENSOR_FILES_TESTING_H_
