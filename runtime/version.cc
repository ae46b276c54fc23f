#include "runtime/version.h"

#include <string>

#include "absl/flags/usage_config.h"

namespace tessel {

void UseVersionForVersionFlag() {
  absl::FlagsUsageConfig config;  // fields left empty keep their current behaviour
  config.version_string = [] { return std::string(kVersion) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace tessel
