#include "rpc/registry_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"

ABSL_FLAG(std::string, registry, "", "host:port of the membership registry (required)");

namespace tessel {

absl::StatusOr<std::string> RegistryAddressFromFlags() {
  std::string address = absl::GetFlag(FLAGS_registry);
  if (address.empty()) {
    return absl::InvalidArgumentError("--registry is required (host:port of tessel-registry)");
  }
  return address;
}

}  // namespace tessel
