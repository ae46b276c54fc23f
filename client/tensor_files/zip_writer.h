// ZipWriter: an uncompressed zip archive (every entry "stored", CRC-32
// checked) written front to back onto a std::ostream: the container of
// torch's serialization format and of numpy's .npz.
//
// Contract:
//   - Entries are written in the order added, each with its CRC-32 and sizes
//     in its local header (no data descriptors), names flagged UTF-8, the
//     date 1980-01-01 00:00 (so equal inputs give equal bytes).
//   - With `align` > 1 each entry's data starts at a multiple of `align` bytes
//     from the start of the archive, by an extra field of id "FB" filled
//     with 'Z', as torch's writer pads (torch.save aligns to 64).
//   - Zip64 records are written where a size, an offset or the entry count
//     does not fit the classic fields, or for every entry with
//     `force_zip64` (what numpy's savez does; tests use it to reach the
//     zip64 path without 4 GiB of data).
//   - Finish writes the central directory and the end records; the archive
//     is complete only after it returns OK. Any stream error or duplicate
//     entry name is an error, and the writer refuses further calls.
// Threads: one writer, one thread.
//
// Example:
//   std::ostringstream out;
//   ZipWriter zip(&out, {.align = 64});
//   TESSEL_RETURN_IF_ERROR(zip.Add("archive/version", {"3\n"}));
//   TESSEL_RETURN_IF_ERROR(zip.Finish());
#ifndef TESSEL_CLIENT_TENSOR_FILES_ZIP_WRITER_H_
#define TESSEL_CLIENT_TENSOR_FILES_ZIP_WRITER_H_

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessel::tensor_files {

// CRC-32 (ISO-HDLC, zip's and zlib's), continued from `crc` (0 to start).
uint32_t Crc32(absl::string_view bytes, uint32_t crc = 0);

class ZipWriter {
 public:
  struct Options {
    int64_t align = 1;  // data offsets are multiples of this (1 = no padding)
    bool force_zip64 = false;
  };

  // `out` is not owned and must outlive the writer.
  ZipWriter(std::ostream* out, Options options);

  // Adds an entry whose contents are the concatenation of `parts`.
  absl::Status Add(const std::string& name, const std::vector<absl::string_view>& parts);
  // Writes the central directory and the end records.
  absl::Status Finish();

  int64_t bytes_written() const { return offset_; }

 private:
  struct Entry {
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t header_offset = 0;
    bool zip64 = false;
  };
  absl::Status Write(absl::string_view bytes);

  std::ostream* const out_;
  const Options options_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;
  std::set<std::string> names_;
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace tessel::tensor_files

#endif  // TESSEL_CLIENT_TENSOR_FILES_ZIP_WRITER_H_
