// Fuzz target: tessel::DecodeHeader, the data-path frame header decoder.
// Every UCX message a peer sends passes through it first.
//
// Invariants:
//   - rejection is InvalidArgument, never a crash;
//   - only 64-byte inputs are accepted, and an accepted header re-encodes to
//     exactly the same 64 bytes (Decode and Encode are inverse);
//   - the result does not depend on the buffer's alignment.
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/wire.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessel::FrameHeader;
  absl::StatusOr<FrameHeader> h = tessel::DecodeHeader(data, size);

  // The same bytes at an odd address: decoding must not assume alignment.
  std::vector<uint8_t> shifted(size + 1);
  if (size > 0) std::memcpy(shifted.data() + 1, data, size);
  absl::StatusOr<FrameHeader> h2 = tessel::DecodeHeader(shifted.data() + 1, size);
  FUZZ_CHECK(h.ok() == h2.ok(), "decoding depends on the buffer's alignment");

  if (!h.ok()) {
    tessel::fuzz::CheckRefusal(h.status());
    return 0;
  }
  FUZZ_CHECK(size == tessel::kHeaderBytes, absl::StrCat("accepted a ", size, "-byte frame header"));
  const tessel::HeaderBytes again = tessel::EncodeHeader(*h);
  FUZZ_CHECK(std::memcmp(again.data(), data, tessel::kHeaderBytes) == 0,
             absl::StrCat("decoded header ", tessel::DescribeHeader(*h),
                          " re-encodes to different bytes"));
  const tessel::HeaderBytes again2 = tessel::EncodeHeader(*h2);
  FUZZ_CHECK(again == again2, "misaligned decode gave different fields");
  return 0;
}
