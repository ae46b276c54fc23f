#include "rpc/token_env.h"

#include <cstdlib>

#include "rpc/token_files.h"

namespace tessel {

absl::StatusOr<std::string> PresentedToken(absl::string_view given) {
  if (!given.empty()) return std::string(given);
  if (const char* token = std::getenv("TESSEL_TOKEN"); token != nullptr && *token != '\0') {
    return std::string(token);
  }
  if (const char* path = std::getenv("TESSEL_TOKEN_FILE"); path != nullptr && *path != '\0') {
    return ReadTokenFile("$TESSEL_TOKEN_FILE", path);
  }
  return std::string();
}

}  // namespace tessel
