#include "client/tensor_files/testing.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/tensor_files/zip_writer.h"
#include "nlohmann/json.hpp"

namespace tessel::tensor_files::testing {
namespace {

class Bytes {
 public:
  explicit Bytes(const std::string& b) : b_(b) {}
  bool Has(uint64_t at, uint64_t n) const { return at <= b_.size() && n <= b_.size() - at; }
  uint64_t Le(uint64_t at, int n) const {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b_[at + i]);
    return v;
  }
  std::string Sub(uint64_t at, uint64_t n) const { return b_.substr(at, n); }
  uint64_t size() const { return b_.size(); }

 private:
  const std::string& b_;
};

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError("zip: " + what); }

}  // namespace

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Sample> MakeSample() {
  auto s = std::make_unique<Sample>();
  const std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
      {"fc0.weight", {2, 3}}, {"fc0.bias", {3}}, {"scale", {}},
      {"one", {1}},           {"empty", {0}},    {"empty2d", {0, 4}},
      {"big", {300, 7}},      {"special", {6}},  {"unicode.\xc3\xa9", {2}}};
  s->values.reserve(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<float> v(static_cast<size_t>(NumElements(specs[k].second)));
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>(k) * 100.f + static_cast<float>(i) * 0.25f - 3.f;
    }
    if (specs[k].first == "special") {
      const uint32_t bits[] = {0x80000000u, 0x7f800000u, 0xff800000u,
                               0x7fc00001u, 0x00000001u, 0x3f800000u};
      std::memcpy(v.data(), bits, sizeof(bits));
    }
    s->values.push_back(std::move(v));
    s->tensors.push_back({specs[k].first, specs[k].second, s->values.back()});
  }
  return s;
}

std::string WriteExpected(const std::vector<NamedTensor>& tensors, const std::string& name) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const NamedTensor& t : tensors) {
    j[t.name] = {{"shape", t.shape},
                 {"hex", absl::BytesToHexString(absl::string_view(
                             reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4))}};
  }
  const std::string path = TmpPath(name);
  std::ofstream(path, std::ios::binary) << j.dump();
  return path;
}

absl::StatusOr<ZipArchive> ReadZip(const std::string& bytes) {
  const Bytes b(bytes);
  ZipArchive zip;
  if (b.size() < 22) return Bad("shorter than an end record");
  const uint64_t end = b.size() - 22;  // we write no archive comment
  if (b.Le(end, 4) != 0x06054b50) return Bad("no end record in the last 22 bytes");
  uint64_t count = b.Le(end + 10, 2), cd_size = b.Le(end + 12, 4), cd_offset = b.Le(end + 16, 4);
  if (end >= 20 && b.Le(end - 20, 4) == 0x07064b50) {
    zip.zip64_end = true;
    const uint64_t record = b.Le(end - 20 + 8, 8);
    if (!b.Has(record, 56) || b.Le(record, 4) != 0x06064b50) return Bad("bad zip64 end record");
    if (record + 56 != end - 20) return Bad("the zip64 end record is not just before its locator");
    count = b.Le(record + 32, 8);
    cd_size = b.Le(record + 40, 8);
    cd_offset = b.Le(record + 48, 8);
  }
  if (!b.Has(cd_offset, cd_size)) return Bad("the central directory is outside the file");
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (!b.Has(at, 46) || b.Le(at, 4) != 0x02014b50) return Bad("bad central header");
    ZipEntry e;
    e.flags = static_cast<uint16_t>(b.Le(at + 8, 2));
    if (b.Le(at + 10, 2) != 0) return Bad("an entry is compressed");
    const uint32_t crc = static_cast<uint32_t>(b.Le(at + 16, 4));
    uint64_t csize = b.Le(at + 20, 4), usize = b.Le(at + 24, 4);
    const uint64_t name_len = b.Le(at + 28, 2), extra_len = b.Le(at + 30, 2),
                   comment_len = b.Le(at + 32, 2);
    uint64_t local = b.Le(at + 42, 4);
    e.name = b.Sub(at + 46, name_len);
    for (uint64_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint64_t id = b.Le(x, 2), len = b.Le(x + 2, 2);
      uint64_t f = x + 4;
      if (id == 1) {
        e.zip64 = true;
        if (usize == 0xffffffffu) usize = b.Le(f, 8), f += 8;
        if (csize == 0xffffffffu) csize = b.Le(f, 8), f += 8;
        if (local == 0xffffffffu) local = b.Le(f, 8);
      }
      x += 4 + len;
    }
    if (csize != usize) return Bad(e.name + ": sizes differ in a stored entry");
    if (!b.Has(local, 30) || b.Le(local, 4) != 0x04034b50)
      return Bad(e.name + ": bad local header");
    if (b.Le(local + 14, 4) != crc) return Bad(e.name + ": local and central CRC differ");
    const uint64_t lname = b.Le(local + 26, 2), lextra = b.Le(local + 28, 2);
    if (b.Sub(local + 30, lname) != e.name) return Bad(e.name + ": local name differs");
    e.data_offset = local + 30 + lname + lextra;
    if (!b.Has(e.data_offset, usize)) return Bad(e.name + ": data outside the file");
    e.data = b.Sub(e.data_offset, usize);
    if (Crc32(e.data) != crc) return Bad(e.name + ": CRC-32 does not match the data");
    zip.entries.push_back(std::move(e));
    at += 46 + name_len + extra_len + comment_len;
  }
  if (at != cd_offset + cd_size) return Bad("the central directory size is wrong");
  return zip;
}

}  // namespace tessel::tensor_files::testing
