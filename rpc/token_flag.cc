#include "rpc/token_flag.h"

#include "absl/flags/flag.h"
#include "rpc/token_files.h"

ABSL_FLAG(std::string, token_file, "",
          "file holding the token this process presents to servers and registries that require "
          "one: a worker's worker token (their --worker_token_file) or the admin token; a shard "
          "server's server token (the registry's --server_token_file)");

namespace tessel {

absl::StatusOr<std::string> TokenFromFlag() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  if (path.empty()) return std::string();
  return ReadTokenFile("--token_file", path);
}

}  // namespace tessel
