// The authorization decision shared by every service (shard server,
// registry), on plain values: a Caller (rpc/caller.h), the service and RPC
// (a row of rpc/role_table.h) and the job the request names. No gRPC types:
// rpc/auth.h adapts it to grpc::ServerContext and grpc::Status.
//
// Credentials: a bearer token ("Bearer <token>") matched in constant time
// against the admin token, the worker tokens (each with its scope) and the
// server tokens (IdentifyToken); and, under mutual TLS, the client
// certificate's grants (rpc/certificate_grants.h). A caller may hold both;
// an RPC passes when any of its grants allows it. A token that matches
// nothing is refused (PERMISSION_DENIED) where a credential is needed; where
// an anonymous caller would pass, it passes as anonymous.
//
// When the table is enforced: nothing is checked while no credential is
// configured (no token file, no `certificate_roles`): everything is allowed,
// as before roles existed. Otherwise every RPC follows the table (RuleFor)
// with these exceptions, so that a deployment that only has an admin token
// keeps working: registry member operations stay open unless member
// credentials are configured (a Join as ROLE_SERVER needs server or admin
// credentials once server tokens or certificate roles are configured; a Join
// of any other role needs worker or admin credentials once worker tokens or
// certificate roles are; GetView and Watch need any credential once either
// is), and Heartbeat and Leave need no role: they act only on the caller's
// own lease, which the registry service binds to the joining caller's
// identity (registry/lease_holders.h).
//
// Tenants: a worker grant reaches a name derived from its scope (not named
// by it) only where its holder created what exists of that name
// (rpc/caller.h); the service supplies the creator to Check.
//
// Identities (Grant::identity): a token's is TokenIdentity (a SHA-256
// fingerprint, never the token), a certificate's its subject
// (rpc/certificate_grants.h).
//
// Refusals: UNAUTHENTICATED when no valid credential was presented,
// PERMISSION_DENIED when the credential's role or scope does not allow the
// call (or the RPC has no row); both say which credential would.
//
// Thread rules: immutable after construction; every method is const and may
// be called from any number of threads at once.
//
// Example:
//   AccessPolicy policy(options, "this shard server");
//   Caller caller = policy.IdentifyToken("Bearer " + token);
//   absl::Status s = policy.Check(caller, "ShardServer", "CreateJob", "mlp.g1");
#ifndef TESSEL_RPC_ACCESS_POLICY_H_
#define TESSEL_RPC_ACCESS_POLICY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "rpc/auth_options.h"
#include "rpc/caller.h"
#include "rpc/role_table.h"

namespace tessel {

// "token sha256:<first 16 bytes of SHA-256(token), hex>": a token's
// identity, stable across processes, safe to log and to store.
std::string TokenIdentity(absl::string_view token);

class AccessPolicy {
 public:
  // `service` names the server in refusals, e.g. "this shard server".
  AccessPolicy(AuthOptions options, std::string service);

  // True when some credential is configured, so the table is enforced.
  bool enabled() const { return enabled_; }
  const AuthOptions& options() const { return options_; }

  // The caller a bearer `authorization` header value names ("" = none).
  Caller IdentifyToken(absl::string_view authorization_header) const;

  // False when `rpc` of `service` has a row that lets anyone through under
  // this configuration, so the caller need not be identified at all.
  bool NeedsCredential(absl::string_view service, absl::string_view rpc) const;

  // OK when `caller` may call `rpc` of `service` (RuleFor) on `job` ("" for
  // RPCs not about one job). `creator`: who created what exists of `job`
  // (rpc/caller.h's tenants' rule), looked up by the service where
  // Caller::ReachesOnlyByDerivation(job); nullopt = nothing exists (or not
  // looked up: the caller does not reach it by derivation). Refusals name
  // what would be allowed.
  absl::Status Check(const Caller& caller, absl::string_view service, absl::string_view rpc,
                     absl::string_view job = "", const Creator& creator = std::nullopt) const;

  // A PERMISSION_DENIED for `caller` that the table alone cannot express
  // (e.g. a worker restoring an older checkpoint): "<service> refuses <rpc>:
  // the <role> credential (<source>) may not <action> (an admin credential
  // may: <how>)".
  absl::Status Deny(const Caller& caller, absl::string_view rpc, absl::string_view action,
                    absl::string_view how) const;

 private:
  bool Enforced(Anonymous anonymous) const;

  const AuthOptions options_;
  const std::string service_;
  const bool enabled_;
};

}  // namespace tessel

#endif  // TESSEL_RPC_ACCESS_POLICY_H_
