// The role table: which role may call which RPC of the tessel.v1 services
// (ShardServer, Registry), when an RPC is open without a credential, what a
// refusal says the caller may not do, and whether a worker's job scope
// applies. Data only; rpc/access_policy.h decides with it.
//
// Roles (docs/operations.md, "Roles and credentials"):
//   admin   everything: tesselctl, an operator (never listed: always allowed).
//   worker  creates, joins and trains its own job: CreateJob (with the
//           restore of the job's latest checkpoint, never an older one:
//           the shard service decides that), SetEpoch, SaveCheckpoint,
//           ReadState/WriteState (not behind the job's latest complete
//           checkpoint: a rewind, decided by the shard service),
//           ReadCheckpoint, reads,
//           the registry Join of its job. A job scope reaches names derived
//           from the job only where the credential created them
//           (rpc/caller.h).
//           Not DeleteJob (except the SDK's transient helper jobs it
//           creates itself), not DeleteCheckpoint.
//   server  the registry Join of a shard server.
//   reader  stats and listings.
//
// Every RPC of both services has exactly one row (role_table_test checks
// the services' descriptors). The table is built once, immutable, and safe
// to read from any thread.
//
// Example:
//   const RpcRule* rule = RuleFor("ShardServer", "DeleteCheckpoint");
//   // rule->roles is empty: admin only; rule->job_scoped: true
#ifndef TESSEL_RPC_ROLE_TABLE_H_
#define TESSEL_RPC_ROLE_TABLE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessel {

enum class Role { kAdmin, kWorker, kServer, kReader };
std::string RoleName(Role role);  // "admin", "worker", ...

// When an RPC may be called without a credential, once the table is
// enforced (rpc/access_policy.h).
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

}  // namespace tessel

#endif  // TESSEL_RPC_ROLE_TABLE_H_
