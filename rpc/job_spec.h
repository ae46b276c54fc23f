// Adapters between the JobSpec protocol message and the pure-logic types
// (Layout, OptimizerParams), with the validation every process applies to a
// spec before using it. Shared by the shard server and the worker SDK so both
// refuse the same bad specs with the same words.
#ifndef TESSEL_RPC_JOB_SPEC_H_
#define TESSEL_RPC_JOB_SPEC_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "proto/shard.pb.h"

namespace tessel {

absl::StatusOr<OptimizerParams> OptimizerFromProto(const v1::OptimizerConfig& c);
v1::OptimizerConfig OptimizerToProto(const OptimizerParams& p);

// Checks the whole spec (names, sizes, dtypes, strategy, optimizer) and
// derives its layout.
absl::StatusOr<Layout> ValidateJobSpec(const v1::JobSpec& spec);

// "" if equal, else a description of the first difference.
std::string DiffJobSpecs(const v1::JobSpec& a, const v1::JobSpec& b);

// "" if a checkpoint written under `saved` may be restored under `spec`,
// else the first difference: the shard count, world size, bucket size,
// alignment, checkpoint policy, compression (the push's wire form) and
// rank groups (the hosts of a run) may change on restore; the model,
// strategy and optimizer may not.
std::string DiffRestorableSpecs(const v1::JobSpec& saved, const v1::JobSpec& spec);

// The spec as protobuf JSON with the .proto's field names, as checkpoints
// keep it, and back. Errors are InvalidArgument with protobuf's words.
absl::StatusOr<std::string> JobSpecToJson(const v1::JobSpec& spec);
absl::StatusOr<v1::JobSpec> JobSpecFromJson(const std::string& json);

absl::StatusOr<v1::Strategy> ParseStrategy(const std::string& name);
std::string StrategyName(v1::Strategy s);

// The half type a job moves on the wire and keeps on workers, or nullopt for
// float32 (a validated spec's tensors all share one dtype).
std::optional<HalfType> JobHalfType(const v1::JobSpec& spec);

// Hierarchical aggregation (JobSpec.rank_groups, validated): each rank's
// group, and how many groups there are; flat jobs: group r is rank r.
std::vector<int> RankGroups(const v1::JobSpec& spec);
int NumRankGroups(const v1::JobSpec& spec);

}  // namespace tessel

#endif  // TESSEL_RPC_JOB_SPEC_H_
