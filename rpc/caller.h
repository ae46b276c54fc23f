// Who is calling, as the authorization decides on it: the grants a caller
// holds (from a bearer token and/or a client certificate), each a role and,
// for a worker, the jobs it is scoped to. Plain values, no gRPC types.
//
// A worker grant scoped to job J covers J and every name derived from J by
// core/job_name.h's grammar (JobInScope): parameter groups "J.g<N>",
// hybrid partitions "J.p<P>.t<T>", the mesh group "J.mesh", reducer helper
// jobs "J~sync<N>.e<E>" and their combinations ("J.g1~sync8.e1"). An
// unscoped worker grant covers every job.
//
// Tenants apart: a derived name reached only through a scope (J's scope
// reaching "J.g1", not a scope that names "J.g1" itself) is the caller's
// only when nothing of that name exists yet (so the worker may create it) or
// when what exists was created by the same credential: its creator, as the
// shard server records it (Identity() of the creating caller), equals the
// caller's Identity(). Another tenant's job that happens to be named "J.g1"
// (its credential scoped to "J.g1") stays out of J's reach.
//
// Example:
//   Caller caller;
//   caller.grants.push_back({Role::kWorker, {"mlp"}, "token", "token sha256:..."});
//   caller.MayActOnJob("mlp.g1");  // true
//   caller.MayActOnJob("mlp2");    // false
//   caller.MayActOnJob("mlp.g1", /*creator=*/"token sha256:...");  // unless its own
#ifndef TESSEL_RPC_CALLER_H_
#define TESSEL_RPC_CALLER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "rpc/role_table.h"

namespace tessel {

// One thing a caller holds.
struct Grant {
  Role role = Role::kReader;
  std::vector<std::string> jobs;  // worker scope; empty = any job
  std::string source;             // "token" or "certificate CN=..., O=..."
  // Who holds it, stable across processes and restarts and safe to store:
  // "token sha256:<32 hex digits>" (a fingerprint, never the token) or
  // "certificate <subject>". "" when not known (tests' hand-made grants).
  std::string identity;

  // True when the grant's scope covers `job` (always for an unscoped grant
  // or an empty job); the role is not looked at.
  bool Covers(absl::string_view job) const;
  // True when the grant reaches `job` without deriving a name: it is
  // unscoped, or one of its scopes is `job` itself.
  bool Names(absl::string_view job) const;
};

// Who created a job or checkpoint: nullopt when nothing of that name exists
// (the caller may create it), otherwise the creator's Caller::Identity()
// ("" when none was recorded: created without credentials, or a checkpoint
// written before creators were recorded).
using Creator = std::optional<std::string>;

struct Caller {
  std::vector<Grant> grants;  // empty: anonymous
  bool bad_token = false;     // sent a token that matches none configured
  bool Has(Role role) const;
  // The caller's credentials as one string: the distinct identities of its
  // grants, in order, joined by " + " ("" for an anonymous caller). What a
  // shard server records as a job's creator and a registry as a lease's
  // holder.
  std::string Identity() const;
  // True when grant `g` of this caller may act on `job` whose creator is
  // `creator` (the tenants' rule in the file comment); the role is not
  // looked at.
  bool GrantReaches(const Grant& g, absl::string_view job, const Creator& creator) const;
  // True when the caller reaches `job` only by deriving it from a worker
  // scope: no admin grant, no grant that Names(job), some worker grant that
  // covers it. Only then does the job's creator matter (look it up).
  bool ReachesOnlyByDerivation(absl::string_view job) const;
  // An admin grant, or a worker grant that reaches `job` (GrantReaches).
  bool MayActOnJob(absl::string_view job, const Creator& creator = std::nullopt) const;
};

}  // namespace tessel

#endif  // TESSEL_RPC_CALLER_H_
