// Fuzz target: the UCX transport's zero-copy wire codec
// (transport/ucx/internal/descriptor_codec.h). Every DESCRIPTOR (a payload
// in the sender's payload memory) and every RELEASE a peer on this host sends
// passes through DecodeDescriptor / DecodeRelease; both decode every input.
//
// Invariants:
//   - rejection is InvalidArgument with a message, never a crash;
//   - an accepted descriptor is exactly 48 + header + rkey bytes, its rkey is
//     not empty, header and rkey lie inside the input, offset + bytes does not
//     wrap, and it re-encodes to exactly the input;
//   - an accepted release is 16 bytes with a known status and re-encodes to
//     the input's first 9 bytes (the 7 padding bytes are ignored);
//   - the results do not depend on the buffer's alignment.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "transport/ucx/internal/descriptor_codec.h"

namespace {

using tessel::ucx_internal::DescriptorView;
using tessel::ucx_internal::Release;

void CheckRefusalWithReason(const absl::Status& s) {
  tessel::fuzz::CheckRefusal(s);
  FUZZ_CHECK(!s.message().empty(), "a refusal without a reason");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ucx = tessel::ucx_internal;
  const absl::Span<const uint8_t> in(data, size);
  std::vector<uint8_t> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  const absl::Span<const uint8_t> odd(shifted.data() + 1, size);

  absl::StatusOr<DescriptorView> d = ucx::DecodeDescriptor(in);
  absl::StatusOr<DescriptorView> d2 = ucx::DecodeDescriptor(odd);
  FUZZ_CHECK(d.ok() == d2.ok(), "descriptor decoding depends on the buffer's alignment");
  if (!d.ok()) {
    CheckRefusalWithReason(d.status());
  } else {
    FUZZ_CHECK(size == ucx::kDescriptorFixedBytes + d->header.size() + d->rkey.size(),
               absl::StrCat("accepted a ", size, "-byte descriptor announcing ", d->header.size(),
                            " + ", d->rkey.size(), " bytes"));
    FUZZ_CHECK(!d->rkey.empty(), "accepted a descriptor without a remote key");
    FUZZ_CHECK(d->header.data() == data + ucx::kDescriptorFixedBytes &&
                   d->rkey.data() == data + ucx::kDescriptorFixedBytes + d->header.size(),
               "header or key outside the input");
    FUZZ_CHECK(d->fields.offset <= d->fields.region_bytes &&
                   d->fields.bytes <= d->fields.region_bytes - d->fields.offset,
               absl::StrCat("accepted ", d->fields.bytes, " bytes at offset ", d->fields.offset,
                            " of a ", d->fields.region_bytes, "-byte region"));
    const std::vector<uint8_t> again = ucx::EncodeDescriptor(d->fields, d->header, d->rkey);
    FUZZ_CHECK(again.size() == size && std::memcmp(again.data(), data, size) == 0,
               absl::StrCat("descriptor (lease ", d->fields.lease, ", region ", d->fields.region,
                            ") re-encodes to different bytes"));
    FUZZ_CHECK(again == ucx::EncodeDescriptor(d2->fields, d2->header, d2->rkey),
               "misaligned decode gave different fields");
  }

  absl::StatusOr<Release> r = ucx::DecodeRelease(in);
  absl::StatusOr<Release> r2 = ucx::DecodeRelease(odd);
  FUZZ_CHECK(r.ok() == r2.ok(), "release decoding depends on the buffer's alignment");
  if (!r.ok()) {
    CheckRefusalWithReason(r.status());
    return 0;
  }
  FUZZ_CHECK(size == ucx::kReleaseBytes, absl::StrCat("accepted a ", size, "-byte release"));
  const std::vector<uint8_t> again = ucx::EncodeRelease(*r);
  FUZZ_CHECK(std::memcmp(again.data(), data, 9) == 0,
             absl::StrCat("release (lease ", r->lease, ") re-encodes to different bytes"));
  FUZZ_CHECK(again == ucx::EncodeRelease(*r2), "misaligned decode gave a different release");
  return 0;
}
