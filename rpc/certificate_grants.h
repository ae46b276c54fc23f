// Roles from a client certificate (mutual TLS), Kubernetes' group and user
// convention: every O (organization) "tessel:ROLE" of the subject grants
// ROLE, and for a worker a CN "worker:JOB" scopes it to JOB. Every grant's
// identity is "certificate " and the whole subject (RFC 2253). Parsed with
// OpenSSL; pure (any thread).
//
// Example:
//   // subject CN=worker:mlp, O=tessel:worker
//   std::vector<Grant> g = GrantsFromCertificate(pem);
//   // g[0].role == Role::kWorker, g[0].jobs == {"mlp"},
//   // g[0].source == "certificate CN=worker:mlp, O=tessel:worker"
//   // g[0].identity == "certificate CN=worker:mlp,O=tessel:worker"
#ifndef TESSEL_RPC_CERTIFICATE_GRANTS_H_
#define TESSEL_RPC_CERTIFICATE_GRANTS_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "rpc/caller.h"

namespace tessel {

// The grants of a client certificate's subject (PEM): every O="tessel:ROLE",
// and CN="worker:JOB" scoping a worker grant. Empty when the certificate
// carries no tessel role (or does not parse).
std::vector<Grant> GrantsFromCertificate(absl::string_view pem);

}  // namespace tessel

#endif  // TESSEL_RPC_CERTIFICATE_GRANTS_H_
