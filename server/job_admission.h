// Whether a shard server takes a job: what CreateJob and a restore from a
// checkpoint check before the job's state is allocated. Plain functions of
// the spec, the checkpoint's manifest and the machine's memory, so every
// refusal is tested without a server; each names the job and what to do.
//
// Example (ShardJob::Create and ShardJob::Restore):
//   TESSEL_RETURN_IF_ERROR(CheckRestorable(spec, manifest));  // a restore only
//   TESSEL_ASSIGN_OR_RETURN(Layout layout, ValidateJobSpec(spec));
//   TESSEL_RETURN_IF_ERROR(
//       CheckShardFits(spec, shard_index, layout, optimizer, PhysicalMemoryBytes()));
#ifndef TESSEL_SERVER_JOB_ADMISSION_H_
#define TESSEL_SERVER_JOB_ADMISSION_H_

#include "absl/status/status.h"
#include "core/checkpoint_manifest.h"
#include "core/layout.h"
#include "core/optimizer_params.h"
#include "proto/shard.pb.h"

namespace tessel {

// This machine's physical memory in bytes (0 if unknown).
double PhysicalMemoryBytes();

// ResourceExhausted, rather than dying allocating it, if shard `shard_index`
// of `spec` cannot fit in half of `memory_bytes`: its served values
// (ServedVersions::BytesPerElement: two versions of the parameters where
// the shard holds them), the optimizer's state slots and one receive buffer
// per rank group, over the shard's range of `layout`. `memory_bytes` 0
// (unknown) is not checked.
absl::Status CheckShardFits(const v1::JobSpec& spec, int shard_index, const Layout& layout,
                            const OptimizerParams& optimizer, double memory_bytes);

// Whether `spec` may start from the checkpoint `manifest` describes, in this
// order: FailedPrecondition for DDP (its parameters and optimizer state are
// on the workers); DataLoss if the checkpoint's spec is unreadable;
// FailedPrecondition if its model, strategy or optimizer differ from
// `spec`'s; the error of ValidateJobSpec(spec); FailedPrecondition if its
// parameter count differs from the layout's; DataLoss if its tensor skips
// are not valid for that layout at its step.
absl::Status CheckRestorable(const v1::JobSpec& spec, const Manifest& manifest);

}  // namespace tessel

#endif  // TESSEL_SERVER_JOB_ADMISSION_H_
