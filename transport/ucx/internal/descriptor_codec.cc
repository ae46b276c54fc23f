#include "transport/ucx/internal/descriptor_codec.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessel {
namespace ucx_internal {
namespace {

void PutLe(uint8_t* at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetLe(const uint8_t* at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(at[i]) << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> EncodeDescriptor(const DescriptorFields& fields,
                                      absl::Span<const uint8_t> header,
                                      absl::Span<const uint8_t> rkey) {
  std::vector<uint8_t> wire(kDescriptorFixedBytes + header.size() + rkey.size());
  uint8_t* p = wire.data();
  PutLe(p + 0, fields.lease, 8);
  PutLe(p + 8, fields.region, 8);
  PutLe(p + 16, fields.remote_base, 8);
  PutLe(p + 24, fields.region_bytes, 8);
  PutLe(p + 32, fields.offset, 8);
  PutLe(p + 40, fields.bytes, 8);
  PutLe(p + 48, header.size(), 4);
  PutLe(p + 52, rkey.size(), 4);
  if (!header.empty()) std::memcpy(p + kDescriptorFixedBytes, header.data(), header.size());
  if (!rkey.empty()) {
    std::memcpy(p + kDescriptorFixedBytes + header.size(), rkey.data(), rkey.size());
  }
  return wire;
}

absl::StatusOr<DescriptorView> DecodeDescriptor(absl::Span<const uint8_t> wire) {
  if (wire.size() < kDescriptorFixedBytes) {
    return absl::InvalidArgumentError(absl::StrCat("UCX payload descriptor of ", wire.size(),
                                                   " bytes is shorter than its ",
                                                   kDescriptorFixedBytes, "-byte fixed part"));
  }
  const uint8_t* p = wire.data();
  DescriptorView d;
  d.fields.lease = GetLe(p + 0, 8);
  d.fields.region = GetLe(p + 8, 8);
  d.fields.remote_base = GetLe(p + 16, 8);
  d.fields.region_bytes = GetLe(p + 24, 8);
  d.fields.offset = GetLe(p + 32, 8);
  d.fields.bytes = GetLe(p + 40, 8);
  const uint64_t header_len = GetLe(p + 48, 4);
  const uint64_t rkey_len = GetLe(p + 52, 4);
  if (kDescriptorFixedBytes + header_len + rkey_len != wire.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX payload descriptor of ", wire.size(), " bytes announces a ", header_len,
                     "-byte header and a ", rkey_len, "-byte remote key (", kDescriptorFixedBytes,
                     " + header + key must be its size)"));
  }
  if (rkey_len == 0) {
    return absl::InvalidArgumentError("UCX payload descriptor carries no remote key");
  }
  // offset + bytes <= region_bytes, written so that nothing overflows.
  if (d.fields.offset > d.fields.region_bytes ||
      d.fields.bytes > d.fields.region_bytes - d.fields.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UCX payload descriptor names ", d.fields.bytes, " bytes at offset ", d.fields.offset,
        " of a ", d.fields.region_bytes, "-byte region (it must lie inside the region)"));
  }
  d.header = wire.subspan(kDescriptorFixedBytes, header_len);
  d.rkey = wire.subspan(kDescriptorFixedBytes + header_len, rkey_len);
  return d;
}

std::vector<uint8_t> EncodeRelease(const Release& release) {
  std::vector<uint8_t> wire(kReleaseBytes, 0);
  PutLe(wire.data(), release.lease, 8);
  wire[8] = static_cast<uint8_t>(release.status);
  return wire;
}

absl::StatusOr<Release> DecodeRelease(absl::Span<const uint8_t> wire) {
  if (wire.size() != kReleaseBytes) {
    return absl::InvalidArgumentError(absl::StrCat("UCX release message of ", wire.size(),
                                                   " bytes (expected ", kReleaseBytes, ")"));
  }
  const uint8_t status = wire[8];
  if (status > static_cast<uint8_t>(ReleaseStatus::kDropped)) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX release message with unknown status ", static_cast<int>(status)));
  }
  Release r;
  r.lease = GetLe(wire.data(), 8);
  r.status = static_cast<ReleaseStatus>(status);
  return r;
}

}  // namespace ucx_internal
}  // namespace tessel
