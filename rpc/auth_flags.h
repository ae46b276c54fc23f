// The credential flags of the services (tessel-server, tessel-registry),
// defined once here: --admin_token_file, --worker_token_file,
// --allow_anonymous_reads, --cert_roles, --insecure, --trust_any_certificate.
// The registry alone adds --server_token_file (registry_main.cc). What a
// process presents to others is rpc/token_flag.h's --token_file.
//
// Example:
//   absl::ParseCommandLine(argc, argv);
//   AuthFlags flags = AuthFlagsFromFlags();
//   flags.tls = TlsOptionsFromFlags().enabled();
//   TESSEL_ASSIGN_OR_RETURN(AuthOptions options, LoadAuthOptions(flags));
#ifndef TESSEL_RPC_AUTH_FLAGS_H_
#define TESSEL_RPC_AUTH_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "rpc/auth_options.h"

ABSL_DECLARE_FLAG(std::string, admin_token_file);
ABSL_DECLARE_FLAG(std::string, worker_token_file);
ABSL_DECLARE_FLAG(bool, allow_anonymous_reads);
ABSL_DECLARE_FLAG(bool, cert_roles);
ABSL_DECLARE_FLAG(bool, insecure);
ABSL_DECLARE_FLAG(bool, trust_any_certificate);

namespace tessel {

// The flags' values (server_token_file empty, tls false: the caller's).
AuthFlags AuthFlagsFromFlags();

}  // namespace tessel

#endif  // TESSEL_RPC_AUTH_FLAGS_H_
