// The token a worker presents when its program did not name one: $TESSEL_TOKEN
// (the token itself), else $TESSEL_TOKEN_FILE (a file holding it, read as
// --token_file is: rpc/token_files.h). Launchers (tessel-launch) set
// TESSEL_TOKEN_FILE, never the token, so it appears in no command line or
// environment listing.
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(options.token, PresentedToken(options.token));
#ifndef TESSEL_RPC_TOKEN_ENV_H_
#define TESSEL_RPC_TOKEN_ENV_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

// `given` when not empty; else $TESSEL_TOKEN; else the token in
// $TESSEL_TOKEN_FILE (an unreadable or empty file is an error naming the
// variable); else "" (no credential).
absl::StatusOr<std::string> PresentedToken(absl::string_view given);

}  // namespace tessel

#endif  // TESSEL_RPC_TOKEN_ENV_H_
