#include "runtime/hostname.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessel {

std::string HostName() {
  const char* env = std::getenv("HOSTNAME");
  if (env != nullptr && *env != '\0') return env;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

absl::StatusOr<int> OrdinalOf(absl::string_view name) {
  const size_t dash = name.rfind('-');
  int ordinal = -1;
  if (dash == absl::string_view::npos || dash + 1 == name.size() ||
      !absl::SimpleAtoi(name.substr(dash + 1), &ordinal) || ordinal < 0 ||
      name.substr(dash + 1).find_first_not_of("0123456789") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host name '", name,
        "' does not end in -N (a StatefulSet pod ordinal such as tessel-server-1); set "
        "$HOSTNAME or pass the index explicitly"));
  }
  return ordinal;
}

absl::StatusOr<int> OrdinalFromHostname() { return OrdinalOf(HostName()); }

}  // namespace tessel
