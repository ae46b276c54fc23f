#include "client/tensor_files/zip_writer.h"

#include <array>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel::tensor_files {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kPadExtraId = 0x4246;  // "FB", torch's padding record
constexpr uint16_t kFlagUtf8 = 0x0800;
constexpr uint16_t kVersion20 = 20;  // stored entries
constexpr uint16_t kVersion45 = 45;  // zip64
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;
constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
constexpr uint16_t kMax16 = std::numeric_limits<uint16_t>::max();

// Slicing-by-4 tables for the reflected polynomial 0xEDB88320.
struct CrcTables {
  std::array<std::array<uint32_t, 256>, 4> t;
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 4; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

void Put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xff));
  s->push_back(static_cast<char>(v >> 8));
}
void Put32(std::string* s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v & 0xffff));
  Put16(s, static_cast<uint16_t>(v >> 16));
}
void Put64(std::string* s, uint64_t v) {
  Put32(s, static_cast<uint32_t>(v & 0xffffffffu));
  Put32(s, static_cast<uint32_t>(v >> 32));
}
uint32_t Clamp32(uint64_t v) { return v >= kMax32 ? kMax32 : static_cast<uint32_t>(v); }

}  // namespace

uint32_t Crc32(absl::string_view bytes, uint32_t crc) {
  static const CrcTables* const tables = new CrcTables();
  const auto& t = tables->t;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  uint32_t c = ~crc;
  while (n >= 4) {
    c ^= static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    c = t[3][c & 0xff] ^ t[2][(c >> 8) & 0xff] ^ t[1][(c >> 16) & 0xff] ^ t[0][c >> 24];
    p += 4;
    n -= 4;
  }
  while (n-- > 0) c = t[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

ZipWriter::ZipWriter(std::ostream* out, Options options) : out_(out), options_(options) {}

absl::Status ZipWriter::Write(absl::string_view bytes) {
  out_->write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out_->good()) {
    failed_ = true;
    return absl::DataLossError(
        absl::StrCat("writing the zip archive failed after ", offset_, " bytes"));
  }
  offset_ += bytes.size();
  return absl::OkStatus();
}

absl::Status ZipWriter::Add(const std::string& name, const std::vector<absl::string_view>& parts) {
  if (failed_ || finished_) {
    return absl::FailedPreconditionError("the zip archive has failed or is finished");
  }
  if (options_.align < 1 || options_.align > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("zip alignment ", options_.align, " is outside [1, 4096]"));
  }
  if (name.empty() || name.size() > kMax16) {
    return absl::InvalidArgumentError(
        absl::StrCat("zip entry names are 1 to 65535 bytes; got ", name.size()));
  }
  if (!names_.insert(name).second) {
    return absl::InvalidArgumentError(absl::StrCat("zip entry '", name, "' is added twice"));
  }
  Entry e;
  e.name = name;
  e.header_offset = offset_;
  for (absl::string_view p : parts) {
    e.crc = Crc32(p, e.crc);
    e.size += p.size();
  }
  e.zip64 = options_.force_zip64 || e.size >= kMax32 || e.header_offset >= kMax32;

  std::string extra;
  if (e.zip64) {
    Put16(&extra, kZip64ExtraId);
    Put16(&extra, 16);
    Put64(&extra, e.size);  // uncompressed
    Put64(&extra, e.size);  // compressed
  }
  if (options_.align > 1) {
    const uint64_t align = static_cast<uint64_t>(options_.align);
    const uint64_t before = e.header_offset + 30 + name.size() + extra.size() + 4;
    const uint64_t pad = (align - before % align) % align;
    Put16(&extra, kPadExtraId);
    Put16(&extra, static_cast<uint16_t>(pad));
    extra.append(pad, 'Z');
  }
  std::string h;
  Put32(&h, kLocalHeaderSig);
  Put16(&h, e.zip64 ? kVersion45 : kVersion20);
  Put16(&h, kFlagUtf8);
  Put16(&h, 0);  // stored
  Put16(&h, 0);  // 00:00
  Put16(&h, kDosDate1980);
  Put32(&h, e.crc);
  Put32(&h, e.zip64 ? kMax32 : static_cast<uint32_t>(e.size));
  Put32(&h, e.zip64 ? kMax32 : static_cast<uint32_t>(e.size));
  Put16(&h, static_cast<uint16_t>(name.size()));
  Put16(&h, static_cast<uint16_t>(extra.size()));
  h += name;
  h += extra;
  TESSEL_RETURN_IF_ERROR(Write(h));
  for (absl::string_view p : parts) {
    TESSEL_RETURN_IF_ERROR(Write(p));
  }
  entries_.push_back(std::move(e));
  return absl::OkStatus();
}

absl::Status ZipWriter::Finish() {
  if (failed_ || finished_) {
    return absl::FailedPreconditionError("the zip archive has failed or is finished");
  }
  const uint64_t cd_offset = offset_;
  bool zip64_end = options_.force_zip64 || entries_.size() >= kMax16;
  for (const Entry& e : entries_) {
    std::string extra;
    if (e.zip64) {
      Put16(&extra, kZip64ExtraId);
      Put16(&extra, 24);
      Put64(&extra, e.size);
      Put64(&extra, e.size);
      Put64(&extra, e.header_offset);
      zip64_end = true;
    }
    std::string h;
    Put32(&h, kCentralHeaderSig);
    Put16(&h, e.zip64 ? kVersion45 : kVersion20);  // made by (MS-DOS attributes)
    Put16(&h, e.zip64 ? kVersion45 : kVersion20);  // needed
    Put16(&h, kFlagUtf8);
    Put16(&h, 0);
    Put16(&h, 0);
    Put16(&h, kDosDate1980);
    Put32(&h, e.crc);
    Put32(&h, e.zip64 ? kMax32 : static_cast<uint32_t>(e.size));
    Put32(&h, e.zip64 ? kMax32 : static_cast<uint32_t>(e.size));
    Put16(&h, static_cast<uint16_t>(e.name.size()));
    Put16(&h, static_cast<uint16_t>(extra.size()));
    Put16(&h, 0);  // comment
    Put16(&h, 0);  // disk
    Put16(&h, 0);  // internal attributes
    Put32(&h, 0);  // external attributes
    Put32(&h, e.zip64 ? kMax32 : static_cast<uint32_t>(e.header_offset));
    h += e.name;
    h += extra;
    TESSEL_RETURN_IF_ERROR(Write(h));
  }
  const uint64_t cd_size = offset_ - cd_offset;
  zip64_end = zip64_end || cd_offset >= kMax32 || cd_size >= kMax32;
  std::string end;
  if (zip64_end) {
    const uint64_t record = offset_;
    Put32(&end, kZip64EndSig);
    Put64(&end, 44);  // the record's size after this field
    Put16(&end, kVersion45);
    Put16(&end, kVersion45);
    Put32(&end, 0);
    Put32(&end, 0);
    Put64(&end, entries_.size());
    Put64(&end, entries_.size());
    Put64(&end, cd_size);
    Put64(&end, cd_offset);
    Put32(&end, kZip64LocatorSig);
    Put32(&end, 0);
    Put64(&end, record);
    Put32(&end, 1);
  }
  const uint16_t count =
      entries_.size() >= kMax16 ? kMax16 : static_cast<uint16_t>(entries_.size());
  Put32(&end, kEndSig);
  Put16(&end, 0);
  Put16(&end, 0);
  Put16(&end, count);
  Put16(&end, count);
  Put32(&end, Clamp32(cd_size));
  Put32(&end, Clamp32(cd_offset));
  Put16(&end, 0);  // comment
  TESSEL_RETURN_IF_ERROR(Write(end));
  out_->flush();
  if (!out_->good()) {
    failed_ = true;
    return absl::DataLossError("flushing the zip archive failed");
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace tessel::tensor_files
