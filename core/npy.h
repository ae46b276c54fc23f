// NumPy .npy files holding one 1-D float32 array: the one layout Tessel reads
// and writes (checkpoint shards, test fixtures, data exchange with Python).
//
// Contract:
//   - Only format version 1.0, dtype '<f4', fortran_order False and a 1-D shape
//     `(N,)` are accepted; the header dict may be written with any key order,
//     either quote style and any whitespace Python's literal syntax allows.
//     Everything else (other versions, dtypes or byte orders, Fortran order,
//     other ranks, a header longer than the file, truncated data, bytes after
//     the data) is an error whose message names the file, what is wrong and
//     what is expected.
//   - WriteNpyF32 produces exactly the bytes numpy 1.24's np.save writes for a
//     1-D float32 array (header padded with spaces and a final '\n' so the data
//     starts at a multiple of 64 bytes). It writes `path + ".tmp"`, fsyncs it,
//     renames it over `path` and fsyncs the directory, so readers see either
//     the old file or the complete new one.
//   - Little-endian hosts only (as every Tessel target is).
//
// Example:
//   TESSEL_RETURN_IF_ERROR(WriteNpyF32("/ckpt/w.npy", weights));
//   TESSEL_ASSIGN_OR_RETURN(std::vector<float> w, ReadNpyF32("/ckpt/w.npy"));
#ifndef TESSEL_CORE_NPY_H_
#define TESSEL_CORE_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tessel {

// Reads a 1-D float32 .npy file. Errors: NotFound / PermissionDenied (from
// open), InvalidArgument (not a .npy file, or a layout other than the one
// above), DataLoss (header or data cut short, trailing bytes).
absl::StatusOr<std::vector<float>> ReadNpyF32(const std::string& path);

// The parser behind ReadNpyF32, on the complete file contents: pure, no I/O,
// safe on any bytes (it is fuzzed: fuzz/npy_fuzzer.cc). Same acceptance and
// the same errors as ReadNpyF32, naming the input `name_for_errors`.
absl::StatusOr<std::vector<float>> ParseNpyF32(absl::string_view bytes,
                                               const std::string& name_for_errors);

// The complete header (magic, version 1.0, length, padded dict) numpy 1.24's
// np.save writes before the data of a C-order '<f4' array of `shape` ([] is
// a 0-d array): what WriteNpyF32 writes for 1-D, and what an .npz's members
// start with (client/tensor_files/npz.h). Shapes whose dict would pass the
// 65535-byte limit of version 1.0 are the caller's to avoid (32 dimensions
// of any size fit).
std::string NpyHeaderF32(absl::Span<const int64_t> shape);
// The same for an array of numpy dtype `descr` ("<i8", "|b1", ...).
std::string NpyHeader(absl::string_view descr, absl::Span<const int64_t> shape);

// Writes `data` as a 1-D float32 .npy file, atomically (see above).
absl::Status WriteNpyF32(const std::string& path, absl::Span<const float> data);

}  // namespace tessel

#endif  // TESSEL_CORE_NPY_H_
