#include "rpc/role_table.h"

namespace tessel {
namespace {

constexpr absl::string_view kShard = "ShardServer";
constexpr absl::string_view kRegistry = "Registry";

using R = Role;

}  // namespace

std::string RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
    case Role::kServer:
      return "server";
    case Role::kReader:
      return "reader";
  }
  return "unknown";
}

const std::vector<RpcRule>& RoleTable() {
  static const auto* table = new std::vector<RpcRule>{
      // Shard server: a job's life is the worker's, its end and its
      // checkpoints' end the operator's.
      {kShard, "CreateJob", {R::kWorker}, Anonymous::kNever, "create or join this job", true},
      {kShard, "SetEpoch", {R::kWorker}, Anonymous::kNever, "set this job's epoch", true},
      {kShard,
       "GetFrameKey",
       {R::kWorker},
       Anonymous::kNever,
       "get this job's data-path frame key",
       true},
      {kShard,
       "GetMeshKey",
       {R::kWorker},
       Anonymous::kNever,
       "get this job's worker-to-worker mesh key",
       true},
      {kShard,
       "SetOptimizer",
       {R::kWorker},
       Anonymous::kNever,
       "change this job's optimizer settings",
       true},
      {kShard,
       "SkipTensors",
       {R::kWorker},
       Anonymous::kNever,
       "leave tensors without gradients out of this job's step",
       true},
      {kShard,
       "SaveCheckpoint",
       {R::kWorker},
       Anonymous::kNever,
       "save this job's checkpoints",
       true},
      {kShard, "ReadState", {R::kWorker}, Anonymous::kNever, "read this job's state", true},
      {kShard, "WriteState", {R::kWorker}, Anonymous::kNever, "write this job's state", true},
      {kShard,
       "GetStats",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read this job's stats",
       true},
      {kShard,
       "ListJobs",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "list jobs",
       false},
      {kShard,
       "GetServerInfo",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read server info",
       false},
      {kShard,
       "ListCheckpoints",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "list this job's checkpoints",
       true},
      {kShard,
       "GetCheckpoint",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "read this job's checkpoints",
       true},
      {kShard,
       "VerifyCheckpoint",
       {R::kWorker, R::kReader},
       Anonymous::kIfReadsAllowed,
       "verify this job's checkpoints",
       true},
      {kShard,
       "ReadCheckpoint",
       {R::kWorker},
       Anonymous::kNever,
       "read this job's checkpointed parameters",
       true},
      {kShard, "DeleteJob", {}, Anonymous::kNever, "delete jobs", true},
      {kShard, "DeleteCheckpoint", {}, Anonymous::kNever, "delete checkpoints", true},
      // Registry.
      {kRegistry,
       "Join/SERVER",
       {R::kServer},
       Anonymous::kUnlessServerMembers,
       "join as a shard server",
       false},
      {kRegistry,
       "Join/WORKER",
       {R::kWorker},
       Anonymous::kUnlessWorkerMembers,
       "join this job's group",
       true},
      {kRegistry,
       "Heartbeat",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kAlways,
       "renew a lease",
       false},
      {kRegistry,
       "Leave",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kAlways,
       "end a lease",
       false},
      {kRegistry,
       "GetView",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kUnlessMembers,
       "read a group's members",
       false},
      {kRegistry,
       "Watch",
       {R::kWorker, R::kServer, R::kReader},
       Anonymous::kUnlessMembers,
       "watch a group's members",
       false},
      {kRegistry,
       "ListGroups",
       {R::kReader},
       Anonymous::kIfReadsAllowed,
       "list every group",
       false},
  };
  return *table;
}

const RpcRule* RuleFor(absl::string_view service, absl::string_view rpc) {
  for (const RpcRule& r : RoleTable()) {
    if (r.service == service && r.rpc == rpc) return &r;
  }
  return nullptr;
}

}  // namespace tessel
