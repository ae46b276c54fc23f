// Fuzz target: tessel::ParseNpyF32, the .npy parser behind ReadNpyF32
// (parameter files, gradients, data exchange with Python).
//
// Inputs are .npy bytes, or (first byte kStructuredTag, which no .npy file
// starts with) bytes that FuzzedNpy turns into a file with a well-formed
// preamble and a header dict whose every part may be unusual: numbers past
// int64 and uint64, other dtypes, key orders and spellings, wrong lengths.
//
// Invariants:
//   - rejection is InvalidArgument or DataLoss and names the input;
//   - an accepted file is the 10-byte preamble, the header its length field
//     gives, and exactly 4 * N data bytes, which are the values returned;
//   - the element count N is spelled in the header's text (a digit run that,
//     without leading zeros, reads N): an integer that overflowed while being
//     parsed would be accepted as some other count.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/npy.h"
#include "fuzz/fuzz_check.h"

namespace {

constexpr char kName[] = "fuzz-input.npy";
constexpr uint8_t kStructuredTag = 0x01;

template <size_t N>
std::string Pick(FuzzedDataProvider& fdp, const char* const (&choices)[N]) {
  return choices[fdp.ConsumeIntegralInRange<size_t>(0, N - 1)];
}

std::string FuzzedDim(FuzzedDataProvider& fdp) {
  static constexpr const char* kEdges[] = {"0",
                                           "-0",
                                           "007",
                                           "-1",
                                           "2147483648",
                                           "4294967296",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "99999999999999999999"};
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return Pick(fdp, kEdges);
    case 1: {  // a long run of digits
      std::string digits;
      for (int i = fdp.ConsumeIntegralInRange<int>(1, 25); i > 0; --i) {
        digits.push_back(static_cast<char>('0' + fdp.ConsumeIntegralInRange<int>(0, 9)));
      }
      return digits;
    }
    default:
      return absl::StrCat(fdp.ConsumeIntegralInRange<int>(0, 40));
  }
}

std::string FuzzedNpy(FuzzedDataProvider& fdp) {
  static constexpr const char* kDescr[] = {"'<f4'", "\"<f4\"",        "'>f4'", "'<f8'",
                                           "'|u1'", "[('a', '<f4')]", "'<f4"};
  static constexpr const char* kFortran[] = {"False", "True", "0", "Fals"};
  static constexpr const char* kSep[] = {", ", ",", " , ", ",\n\t"};
  const bool plausible = fdp.ConsumeIntegralInRange<int>(0, 3) != 0;
  std::vector<std::string> dims;
  const int rank = plausible ? 1 : fdp.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < rank; ++i) dims.push_back(FuzzedDim(fdp));
  std::string shape = absl::StrJoin(dims, Pick(fdp, kSep));
  if (dims.size() == 1 && (plausible || fdp.ConsumeBool())) shape += ",";
  shape = fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? "[" + shape + "]" : "(" + shape + ")";
  std::vector<std::string> items = {
      "'descr': " + (plausible ? std::string("'<f4'") : Pick(fdp, kDescr)),
      "'fortran_order': " + (plausible ? std::string("False") : Pick(fdp, kFortran)),
      "'shape': " + shape};
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) items.push_back("'extra': 1");
  if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) items.erase(items.begin());
  std::rotate(items.begin(),
              items.begin() + fdp.ConsumeIntegralInRange<size_t>(0, items.size() - 1), items.end());
  std::string dict = "{" + absl::StrJoin(items, Pick(fdp, kSep));
  if (fdp.ConsumeBool()) dict += ", ";
  dict += "}";
  dict.append(fdp.ConsumeIntegralInRange<size_t>(0, 70), ' ');
  dict += "\n";
  const size_t header_len =
      fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? fdp.ConsumeIntegral<uint16_t>() : dict.size();
  std::string out("\x93NUMPY\x01\x00", 8);
  if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
    out[6] = static_cast<char>(fdp.ConsumeIntegral<uint8_t>());  // another major version
  }
  out.push_back(static_cast<char>(header_len & 0xff));
  out.push_back(static_cast<char>((header_len >> 8) & 0xff));
  out += dict;
  // Data: mostly as many floats as a small 1-D shape says, else 0 to 1024 bytes.
  size_t data_bytes = fdp.ConsumeIntegralInRange<size_t>(0, 1024);
  int n = 0;
  if (dims.size() == 1 && dims[0].size() <= 3 && absl::SimpleAtoi(dims[0], &n) && n >= 0 &&
      fdp.ConsumeIntegralInRange<int>(0, 7) != 0) {
    data_bytes = 4 * static_cast<size_t>(n);
  }
  out.append(data_bytes, '\0');
  return out;
}

// True if some maximal run of decimal digits in `text`, leading zeros
// dropped, is `digits` ("0" matches a run of zeros).
bool HasDigitRun(absl::string_view text, const std::string& digits) {
  size_t i = 0;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    absl::string_view run = text.substr(i, end - i);
    while (run.size() > 1 && run[0] == '0') run.remove_prefix(1);
    if (run == digits) return true;
    i = end;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* raw, size_t raw_size) {
  std::string generated;
  if (raw_size > 0 && raw[0] == kStructuredTag) {
    FuzzedDataProvider fdp(raw + 1, raw_size - 1);
    generated = FuzzedNpy(fdp);
    tessel::fuzz::ShowGeneratedInput(absl::CHexEscape(generated));
  }
  const uint8_t* data =
      generated.empty() ? raw : reinterpret_cast<const uint8_t*>(generated.data());
  const size_t size = generated.empty() ? raw_size : generated.size();
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<float>> v = tessel::ParseNpyF32(bytes, kName);
  if (!v.ok()) {
    tessel::fuzz::CheckRefusal(v.status(),
                               {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss});
    FUZZ_CHECK(
        absl::StartsWith(v.status().message(), absl::StrCat("cannot read .npy file ", kName, ": ")),
        absl::StrCat("error does not name the input: ", v.status().ToString()));
    return 0;
  }
  FUZZ_CHECK(size >= 10, absl::StrCat("accepted a ", size, "-byte file"));
  const size_t header_len = data[8] | (static_cast<size_t>(data[9]) << 8);
  const size_t data_offset = 10 + header_len;
  const size_t n = v->size();
  FUZZ_CHECK(data_offset <= size && size - data_offset == n * sizeof(float),
             absl::StrCat("accepted ", n, " values from a ", size,
                          "-byte file whose data starts at ", data_offset));
  FUZZ_CHECK(n == 0 || std::memcmp(v->data(), data + data_offset, n * sizeof(float)) == 0,
             "returned values differ from the file's data bytes");
  FUZZ_CHECK(HasDigitRun(bytes.substr(10, header_len), absl::StrCat(n)),
             absl::StrCat("accepted ", n, " values, but the header does not say ", n, ": \"",
                          absl::CHexEscape(bytes.substr(10, header_len)), "\""));
  return 0;
}
