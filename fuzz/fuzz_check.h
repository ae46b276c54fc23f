// FUZZ_CHECK: the invariant checks of Tessel's fuzz targets.
//
// libFuzzer records an input as a crash when the target aborts, so a broken
// invariant prints what broke and calls abort(); the input is then saved as an
// artifact like any sanitizer finding. Not for library code: decoders report
// bad input with absl::Status, and these checks test exactly that.
//
// Example:
//   FUZZ_CHECK(back.ok(), absl::StrCat("re-encoded manifest rejected: ", back.status()));
//   if (!m.ok()) CheckRefusal(m.status());  // bad input: InvalidArgument
#ifndef TESSEL_FUZZ_FUZZ_CHECK_H_
#define TESSEL_FUZZ_FUZZ_CHECK_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#define FUZZ_CHECK(cond, message)                                                               \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      const std::string fuzz_check_message = (message);                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   fuzz_check_message.c_str());                                                 \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace tessel::fuzz {

// A decoder's refusal of bad input has one of `codes` (InvalidArgument
// unless the decoder documents others); any other code is a broken invariant.
inline void CheckRefusal(const absl::Status& s, std::initializer_list<absl::StatusCode> codes = {
                                                    absl::StatusCode::kInvalidArgument}) {
  FUZZ_CHECK(std::find(codes.begin(), codes.end(), s.code()) != codes.end(),
             absl::StrCat("unexpected error code: ", s.ToString()));
}

// Targets that generate their input from the fuzz bytes print it to stderr
// when TESSEL_FUZZ_SHOW_INPUT is set (run_fuzzers.sh --repro sets it), so a
// crash report can show the document or file that crashed, not just the bytes.
inline void ShowGeneratedInput(const std::string& text) {
  static const bool show = std::getenv("TESSEL_FUZZ_SHOW_INPUT") != nullptr;
  if (show) {
    std::fprintf(stderr, "---- generated input (%zu bytes):\n%s\n---- end of generated input\n",
                 text.size(), text.c_str());
  }
}

}  // namespace tessel::fuzz

#endif  // TESSEL_FUZZ_FUZZ_CHECK_H_
