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
#include "absl/strings/string_view.h"
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
  // --insecure: start with no credential at all (every RPC open, data path
  // unauthenticated); without it a service with none refuses to start.
  bool insecure = false;
  // --trust_any_certificate: mutual TLS with no credential table, every
  // certificate the CA issued holding every role. Without it that
  // configuration refuses to start.
  bool trust_any_certificate = false;
};

// How a service authenticates its callers, decided once at start-up from its
// credential flags (SecurityPostureOf) and shown in its start-up log line,
// GetServerInfo, `tesselctl version` and the status page.
struct SecurityPosture {
  bool tls = false;          // mutual TLS on the control plane
  bool credentials = false;  // a role table: tokens or certificate roles
  bool insecure = false;     // neither: started with --insecure
  // The control plane authenticates callers (TLS or credentials): the data
  // path is then authenticated too (--data_auth=auto).
  bool authenticated() const { return tls || credentials; }
  // "mutual TLS, tokens", "tokens", "mutual TLS, certificate roles",
  // "mutual TLS, any certificate", "insecure".
  std::string description;
};

// Refuses the configurations that would run open without saying so: no
// credential at all without --insecure, and mutual TLS with no credential
// table (every certificate of the CA an admin) without
// --trust_any_certificate. `program` names the binary in the message.
absl::StatusOr<SecurityPosture> SecurityPostureOf(const AuthFlags& flags,
                                                  const AuthOptions& options,
                                                  absl::string_view program);

// Reads the files and checks the whole: no token serves two roles,
// --cert_roles needs TLS. Errors name the flags.
absl::StatusOr<AuthOptions> LoadAuthOptions(const AuthFlags& flags);

}  // namespace tessel

#endif  // TESSEL_RPC_AUTH_OPTIONS_H_
