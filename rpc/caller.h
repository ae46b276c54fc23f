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
// Example:
//   Caller caller;
//   caller.grants.push_back({Role::kWorker, {"mlp"}, "token"});
//   caller.MayActOnJob("mlp.g1");  // true
//   caller.MayActOnJob("mlp2");    // false
#ifndef TESSEL_RPC_CALLER_H_
#define TESSEL_RPC_CALLER_H_

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

  // True when the grant's scope covers `job` (always for an unscoped grant
  // or an empty job); the role is not looked at.
  bool Covers(absl::string_view job) const;
};

struct Caller {
  std::vector<Grant> grants;  // empty: anonymous
  bool bad_token = false;     // sent a token that matches none configured
  bool Has(Role role) const;
  // A worker (or admin) grant that covers `job`.
  bool MayActOnJob(absl::string_view job) const;
};

}  // namespace tessel

#endif  // TESSEL_RPC_CALLER_H_
