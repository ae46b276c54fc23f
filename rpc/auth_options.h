// A service's credential configuration: its admin token, worker tokens (each
// with its job scope) and server tokens, whether certificate roles are
// enforced and anonymous reads allowed; and loading it from the token files
// the service's flags name (rpc/auth_flags.h), checked as a whole.
//
// Example:
//   AuthFlags flags = AuthFlagsFromFlags();
//   flags.tls = tls.enabled();
//   TESSEL_ASSIGN_OR_RETURN(AuthOptions options, LoadAuthOptions(flags));
//   AccessPolicy policy(std::move(options), "this shard server");
#ifndef TESSEL_RPC_AUTH_OPTIONS_H_
#define TESSEL_RPC_AUTH_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rpc/token_files.h"

namespace tessel {

struct AuthOptions {
  std::string token;  // the admin token (--admin_token_file); "" = none
  bool allow_anonymous_reads = true;
  std::vector<RoleToken> worker_tokens;  // --worker_token_file
  std::vector<RoleToken> server_tokens;  // registry: --server_token_file
  // --cert_roles: enforce the role table on the strength of client
  // certificates alone (mutual TLS), even with no token configured.
  // Certificate roles count whenever a certificate carries one; this only
  // turns enforcement on.
  bool certificate_roles = false;
};
using AdminAuthOptions = AuthOptions;  // the name before roles existed

// What the services' flags name: token files and switches.
struct AuthFlags {
  std::string admin_token_file;   // --admin_token_file
  std::string worker_token_file;  // --worker_token_file
  std::string server_token_file;  // --server_token_file (registry)
  bool allow_anonymous_reads = true;
  bool certificate_roles = false;  // --cert_roles
  bool tls = false;                // the service serves mutual TLS
};

// Reads the files and checks the whole: no token serves two roles,
// --cert_roles needs TLS. Errors name the flags.
absl::StatusOr<AuthOptions> LoadAuthOptions(const AuthFlags& flags);

}  // namespace tessel

#endif  // TESSEL_RPC_AUTH_OPTIONS_H_
