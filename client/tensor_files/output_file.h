// An output file that appears complete or not at all: WriteFileAtomically
// writes `path + ".tmp"` in the same folder through the caller's writer,
// fsyncs it, moves it to `path` and fsyncs the folder. On any error the
// temporary file is removed and `path` is untouched.
//
// Contract:
//   - Without `overwrite`, an existing `path` is AlreadyExists, both before
//     writing (CheckOutputPath, so a caller can refuse before fetching
//     anything) and at the move, which never replaces a file that appeared
//     meanwhile (link(2), then unlink of the temporary).
//   - An existing `path + ".tmp"` is AlreadyExists too (another writer's, or
//     a killed one's: the message says to remove it), unless `overwrite`.
//   - The file is written kOutputFileMode (0600: an export holds a model's
//     parameters; `chmod` it to share it), whatever the umask; a file it
//     replaces (overwrite) is replaced by that mode too.
//   - The writer's error is returned as it is; a stream or file system
//     error names the file and the operation.
// Threads: none of its own; one call writes one file.
//
// Example:
//   absl::Status s = WriteFileAtomically("/out/model.npz", /*overwrite=*/false,
//       [&](std::ostream* out) { return WriteNpz(tensors, out); });
#ifndef TESSEL_CLIENT_TENSOR_FILES_OUTPUT_FILE_H_
#define TESSEL_CLIENT_TENSOR_FILES_OUTPUT_FILE_H_

#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tessel::tensor_files {

inline constexpr int kOutputFileMode = 0600;

// AlreadyExists naming `path` (and --force) when it exists and !overwrite;
// InvalidArgument when it is a folder or its folder does not exist.
absl::Status CheckOutputPath(const std::string& path, bool overwrite);

absl::Status WriteFileAtomically(const std::string& path, bool overwrite,
                                 const std::function<absl::Status(std::ostream*)>& write);

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_OUTPUT_FILE_H_
