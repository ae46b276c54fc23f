// --token_file, defined once for every Abseil-flags binary that presents a
// token to servers and registries requiring one: a shard server to its
// registry (the registry's --server_token_file), a worker (a worker token or
// the admin token). tesselctl (CLI11) takes the same name and $TESSEL_TOKEN.
//
// Example:
//   absl::ParseCommandLine(argc, argv);
//   TESSEL_ASSIGN_OR_RETURN(options.token, TokenFromFlag());  // "" when unset
#ifndef TESSEL_RPC_TOKEN_FLAG_H_
#define TESSEL_RPC_TOKEN_FLAG_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, token_file);

namespace tessel {

// The token of --token_file (rpc/token_files.h ReadTokenFile); "" when the
// flag is unset.
absl::StatusOr<std::string> TokenFromFlag();

}  // namespace tessel

#endif  // TESSEL_RPC_TOKEN_FLAG_H_
