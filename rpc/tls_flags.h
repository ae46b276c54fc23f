// The mutual-TLS flags every Abseil-flags binary shares (tessel-registry,
// tessel-server, tessel-train, tessel-replay, tessel-demo,
// tessel-hybrid-train): --tls_ca, --tls_cert, --tls_key, --tls_server_name.
// An unset flag falls back to $TESSEL_TLS_CA, $TESSEL_TLS_CERT,
// $TESSEL_TLS_KEY, $TESSEL_TLS_SERVER_NAME. tesselctl (CLI11) takes the same
// names and variables.
//
// Example:
//   absl::ParseCommandLine(argc, argv);
//   TlsOptions tls = TlsOptionsFromFlags();
//   TESSEL_ASSIGN_OR_RETURN(auto creds, LoadServerCredentials(tls));
#ifndef TESSEL_RPC_TLS_FLAGS_H_
#define TESSEL_RPC_TLS_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "rpc/tls.h"

ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);

namespace tessel {

// The flags, each falling back to its environment variable.
TlsOptions TlsOptionsFromFlags();

}  // namespace tessel

#endif  // TESSEL_RPC_TLS_FLAGS_H_
