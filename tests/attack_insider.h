// //tests:attacker's attacks from inside (Tessel issue 42):
//
// RunMember: a malicious member of the attacked job. The process is a real
//   rank of the job (the Worker SDK training tessel-train's MLP with the same
//   flags), so it holds what a member really holds: the job's worker
//   credential and its own rank's frame keys (GetFrameKey with its own
//   process's claim, the answer its Worker got). At step `attack_at` it
//   stops training (a slow rank: the others wait) and, from a second UCX
//   endpoint, sends frames correctly sealed under its own keys:
//     steal_key     GetFrameKey for every other rank of the job, for a rank
//                   outside the world and for the next epoch (RPCs)
//     other_rank    PUSH as each other rank, every step left (own up key)
//     replay_push   its own rank's PUSH and micro-batch part 0, every step
//                   left, re-sent from another endpoint
//     replay_pull   its own rank's PULL, every step left, from another
//                   endpoint (taken, it would be answered with PARAMS)
//     forged_direction  PARAMS and ERROR to every other rank's worker,
//                   sealed with its up key (a worker's key, not a server's)
//   then trains to the end. With no kinds it only trains (the reference).
//
// RunTenantSetup / RunTenant: another tenant. The setup (the victim tenant's
//   credential) creates the victim's derived-name jobs and its mesh key on
//   every server; the attack (a credential of another tenant whose scope
//   covers the same base name) tries every job RPC on them (CreateJob,
//   a recovery's CreateJob, SetEpoch, GetFrameKey, ReadState, WriteState,
//   DeleteJob) and GetMeshKey on the mesh, then creates a derived name nobody
//   holds (allowed: it becomes that job's creator), takes the real key of
//   its rank 0, and sends INIT, PUSH and PULL for the victim's jobs sealed
//   with it.
//
// Each prints one line to stdout:
//   sent N frames (F failed); kinds K=n ...; answers A; rpcs R/T
// (answers: frames the targets sent to the attacking endpoint; rpcs: RPCs
// refused as expected, of those tried) and exits 0 when every send completed
// and the member trained to the end.
#ifndef TESSEL_TESTS_ATTACK_INSIDER_H_
#define TESSEL_TESTS_ATTACK_INSIDER_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace tessel {

struct InsiderConfig {
  std::string job;              // the attacked job (member) / the base name (tenant)
  std::set<std::string> kinds;  // member: the kinds above; empty: train only
  std::string targets;          // the file of ReadTargets (tests/attack_rpc.h)
  int buckets = 2;              // buckets 0..N-1 of every shard
  int64_t bytes = 4096;         // payload bytes of PUSH, PARAMS and INIT
  // Member: rank, world, shard servers, the step the attack happens at.
  int rank = 0;
  int world = 1;
  int servers = 0;
  int64_t attack_at = 5;
  // Tenant: the victim's derived names, its mesh, the attacker's own name,
  // and the victims' epoch.
  std::vector<std::string> victims;
  std::string mesh;
  std::string own;
  int64_t epoch = 1;
};

int RunMember(const InsiderConfig& config);
int RunTenantSetup(const InsiderConfig& config);
int RunTenant(const InsiderConfig& config);
// The victims' (initialized, step, frames refused) over every server, as
// their tenant reads them: "initialized B step N refused R".
int RunTenantStats(const InsiderConfig& config);

}  // namespace tessel

#endif  // TESSEL_TESTS_ATTACK_INSIDER_H_
