// Least-privilege authorization for the gRPC services (shard server,
// registry): a thin adapter of AccessPolicy (rpc/access_policy.h, the
// decision on plain values) to gRPC: it identifies the caller of a
// grpc::ServerContext (its `authorization: Bearer <token>` metadata and its
// client certificate's grants, rpc/certificate_grants.h) and returns
// grpc::Status. Also the client half: AddToken.
//
// The pieces, each in its own header (included here for the services):
//   rpc/role_table.h          Role, RpcRule, RoleTable, RuleFor
//   rpc/caller.h              Grant, Caller (job scopes: core/job_name.h)
//   rpc/certificate_grants.h  GrantsFromCertificate
//   rpc/token_files.h         RoleToken, ReadTokenFile, ConstantTimeEquals
//   rpc/auth_options.h        AuthOptions, AuthFlags, LoadAuthOptions
//   rpc/auth_flags.h          the services' --*_token_file flags
//   rpc/access_policy.h       AccessPolicy
//
// Thread rules: as AccessPolicy, immutable; any thread.
//
// Example:
//   Authorizer auth(options, "this shard server");
//   Caller caller = auth.Identify(*ctx);
//   if (grpc::Status s = auth.Check(caller, "ShardServer", "DeleteCheckpoint", req->job());
//       !s.ok()) {
//     return s;
//   }
#ifndef TESSEL_RPC_AUTH_H_
#define TESSEL_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/strings/string_view.h"
#include "rpc/access_policy.h"
#include "rpc/auth_options.h"
#include "rpc/caller.h"
#include "rpc/certificate_grants.h"
#include "rpc/role_table.h"
#include "rpc/token_files.h"

namespace tessel {

class Authorizer {
 public:
  // `service` names the server in refusals, e.g. "this shard server".
  Authorizer(AuthOptions options, std::string service);

  // True when some credential is configured, so the table is enforced.
  bool enabled() const { return policy_.enabled(); }
  const AuthOptions& options() const { return policy_.options(); }
  const AccessPolicy& policy() const { return policy_; }

  // The caller's grants: its bearer token and its client certificate.
  Caller Identify(const grpc::ServerContext& ctx) const;
  Caller IdentifyToken(absl::string_view authorization_header) const {
    return policy_.IdentifyToken(authorization_header);
  }

  // AccessPolicy::Check as a grpc::Status (`creator`: see there).
  grpc::Status Check(const Caller& caller, absl::string_view service, absl::string_view rpc,
                     absl::string_view job = "", const Creator& creator = std::nullopt) const;
  // Identify + Check (no identification for an RPC open to anyone).
  grpc::Status Check(const grpc::ServerContext& ctx, absl::string_view service,
                     absl::string_view rpc, absl::string_view job = "") const;

  // AccessPolicy::Deny as a grpc::Status.
  grpc::Status Deny(const Caller& caller, absl::string_view rpc, absl::string_view action,
                    absl::string_view how) const;

 private:
  const AccessPolicy policy_;
};

// Adds `authorization: Bearer <token>` unless `token` is empty.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace tessel

#endif  // TESSEL_RPC_AUTH_H_
