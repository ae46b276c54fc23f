// Least-privilege authorization shared by every gRPC service (shard server,
// registry), and the client half that presents a token.
//
// Roles (docs/operations.md, "Roles and credentials"):
//   admin   everything: tesselctl, an operator.
//   worker  creates, joins and trains its own job: CreateJob (with the
//           restore of the job's latest checkpoint, never an older one:
//           the shard service decides that), SetEpoch, SaveCheckpoint,
//           ReadState/WriteState, reads, the registry Join of its job.
//           Not DeleteJob (except the SDK's transient "J~sync" helper jobs
//           it creates itself), not DeleteCheckpoint.
//   server  the registry Join of a shard server.
//   reader  stats and listings.
// A worker credential may be scoped to jobs: it then covers a job J, and the
// names the worker SDK derives from J (JobInScope): hybrid partitions
// "J.p<P>.t<T>", the mesh group "J.mesh", reducer helper jobs "J~...".
//
// Credentials: a bearer token (metadata `authorization: Bearer <token>`)
// matched in constant time against the admin token, the worker tokens (each
// with its scope) and the server tokens; and, under mutual TLS, the client
// certificate's subject: every O (organization) "tessel:ROLE" grants ROLE,
// and for a worker a CN "worker:JOB" scopes it to JOB (Kubernetes' group and
// user convention). A caller may hold both; an RPC passes when any of its
// grants allows it. A token that matches nothing is refused
// (PERMISSION_DENIED) where a credential is needed; where an anonymous
// caller would pass, it passes as anonymous.
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
// is), and Heartbeat and Leave are always open: they act only on the
// caller's own lease, named by an unguessable id.
//
// Refusals: UNAUTHENTICATED when no valid credential was presented,
// PERMISSION_DENIED when the credential's role or scope does not allow the
// call; both say which credential would.
//
// Example:
//   Authorizer auth(options, "this shard server");
//   Caller caller = auth.Identify(*ctx);
//   if (grpc::Status s = auth.Check(caller, "DeleteCheckpoint", req->job()); !s.ok()) return s;
#ifndef TESSEL_RPC_AUTH_H_
#define TESSEL_RPC_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/job_name.h"

namespace tessel {

enum class Role { kAdmin, kWorker, kServer, kReader };
std::string RoleName(Role role);  // "admin", "worker", ...

// A token and what it grants.
struct RoleToken {
  std::string token;
  Role role = Role::kWorker;
  std::vector<std::string> jobs;  // worker scope; empty = any job
};

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

// What a caller holds: its grants, from a token and/or a certificate.
struct Grant {
  Role role = Role::kReader;
  std::vector<std::string> jobs;  // worker scope; empty = any job
  std::string source;             // "token" or "certificate CN=..., O=..."
};
struct Caller {
  std::vector<Grant> grants;  // empty: anonymous
  bool bad_token = false;     // sent a token that matches none configured
  bool Has(Role role) const;
  // A worker (or admin) grant that covers `job`.
  bool MayActOnJob(absl::string_view job) const;
};

// When an RPC may be called without a credential, once the table is
// enforced (see the file comment).
enum class Anonymous {
  kNever,                // needs a credential whenever any is configured
  kIfReadsAllowed,       // open while allow_anonymous_reads
  kUnlessServerMembers,  // open until server tokens or certificate roles exist
  kUnlessWorkerMembers,  // open until worker tokens or certificate roles exist
  kUnlessMembers,        // open until either exists
  kAlways,               // never checked
};

// One row of the role table.
struct RpcRule {
  absl::string_view service;  // "ShardServer" or "Registry" (tessel.v1)
  absl::string_view rpc;      // method name; "Join/SERVER" and "Join/WORKER" for Join
  std::vector<Role> roles;    // who may (admin always)
  Anonymous anonymous = Anonymous::kNever;
  absl::string_view action;  // refusals: "the worker credential may not <action>"
  bool job_scoped = false;   // a worker grant must cover the request's job
};

// The whole table, and one row (nullptr for an RPC it does not name).
const std::vector<RpcRule>& RoleTable();
const RpcRule* RuleFor(absl::string_view service, absl::string_view rpc);

// JobInScope and IsHelperJob: core/job_name.h, the one grammar of derived
// job names.

// Roles from a client certificate's subject (PEM): every O="tessel:ROLE",
// and CN="worker:JOB" scoping a worker grant. Empty when the certificate
// carries no tessel role (or does not parse).
std::vector<Grant> GrantsFromCertificate(absl::string_view pem);

class Authorizer {
 public:
  // `service` names the server in refusals, e.g. "this shard server".
  Authorizer(AuthOptions options, std::string service);

  // True when some credential is configured, so the table is enforced.
  bool enabled() const { return enabled_; }
  const AuthOptions& options() const { return options_; }

  // The caller's grants: its bearer token and its client certificate.
  Caller Identify(const grpc::ServerContext& ctx) const;
  Caller IdentifyToken(absl::string_view authorization_header) const;

  // OK when `caller` may call `rpc` of `service` (RuleFor) on `job` ("" for
  // RPCs not about one job). Refusals name what would be allowed.
  grpc::Status Check(const Caller& caller, absl::string_view service, absl::string_view rpc,
                     absl::string_view job = "") const;
  // Identify + Check.
  grpc::Status Check(const grpc::ServerContext& ctx, absl::string_view service,
                     absl::string_view rpc, absl::string_view job = "") const;

  // A PERMISSION_DENIED for `caller` that the table alone cannot express
  // (e.g. a worker restoring an older checkpoint): "<service> refuses <rpc>:
  // the <role> credential (<source>) may not <action> (an admin credential
  // may: <how>)".
  grpc::Status Deny(const Caller& caller, absl::string_view rpc, absl::string_view action,
                    absl::string_view how) const;

 private:
  bool Enforced(Anonymous anonymous) const;

  const AuthOptions options_;
  const std::string service_;
  const bool enabled_;
};

// True when `given` equals `secret` (never for an empty secret). Its running
// time depends on the length of `given` only, not on where they differ.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

// Adds `authorization: Bearer <token>` unless `token` is empty.
void AddToken(grpc::ClientContext* ctx, const std::string& token);

// The token of a token file: the first field of its first line that is
// neither blank nor a '#' comment (so a line "TOKEN JOB" of a worker token
// file works too). `flag` names the flag in errors. Tokens shorter than 16
// characters are refused.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path);

// A role's token file: one token per line, optionally followed by the jobs
// it is scoped to ("TOKEN mlp,bert"; workers only); blank lines and '#'
// comments are skipped. At least one token; each at least 16 characters.
absl::StatusOr<std::vector<RoleToken>> ReadRoleTokenFile(absl::string_view flag,
                                                         const std::string& path, Role role);

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

#endif  // TESSEL_RPC_AUTH_H_
