#include "transport/ucx/ucx_options.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessel {

absl::Status ValidateUcxOptions(const UcxOptions& options) {
  if (!options.tcp_port_range.empty()) {
    int lo = 0, hi = 0;
    char rest = 0;
    if (std::sscanf(options.tcp_port_range.c_str(), "%d-%d%c", &lo, &hi, &rest) != 2 || lo < 1 ||
        hi > 65535 || lo > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("UCX tcp port range '", options.tcp_port_range,
                       "' must be LO-HI with 1 <= LO <= HI <= 65535"));
    }
  }
  if (options.spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX spin time ", absl::FormatDuration(options.spin), " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UcxOptions> WithUcxEnvironment(UcxOptions options) {
  if (const char* min = std::getenv("TESSEL_UCX_IN_PLACE_MIN_BYTES")) {
    uint64_t bytes = 0;
    if (!absl::SimpleAtoi(min, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TESSEL_UCX_IN_PLACE_MIN_BYTES='", min,
                       "' is not a size in bytes (a non-negative integer); unset it or fix it"));
    }
    options.in_place_min_bytes = static_cast<size_t>(bytes);
  }
  return options;
}

}  // namespace tessel
