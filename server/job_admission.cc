#include "server/job_admission.h"

#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tensor_steps.h"
#include "rpc/job_spec.h"
#include "server/served_versions.h"

namespace tessel {

double PhysicalMemoryBytes() {
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  return pages > 0 && page > 0 ? pages * page : 0;
}

absl::Status CheckShardFits(const v1::JobSpec& spec, int shard_index, const Layout& layout,
                            const OptimizerParams& optimizer, double memory_bytes) {
  const double range = static_cast<double>(layout.shard_range(shard_index).size());
  // The served values (two versions where the shard holds the parameters
  // and workers may rejoin in place: served_versions.h), the optimizer's
  // state and the receive buffers.
  const double served = static_cast<double>(ServedVersions::BytesPerElement(
      ServedVersions::Kept(spec.strategy() != v1::STRATEGY_DDP, spec.in_place_update()),
      JobHalfType(spec).has_value()));
  const double need = range * (served + 4.0 * StateSlots(optimizer) + 4.0 * NumRankGroups(spec));
  if (memory_bytes <= 0 || need <= memory_bytes / 2) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("job '", spec.job(), "' shard ", shard_index, " needs about ",
                   static_cast<int64_t>(need / (1 << 20)), " MiB; this server has ",
                   static_cast<int64_t>(memory_bytes / (1 << 20)),
                   " MiB of memory: use more shard servers (smaller ranges) or fewer workers"));
}

absl::Status CheckRestorable(const v1::JobSpec& spec, const Manifest& manifest) {
  if (spec.strategy() == v1::STRATEGY_DDP) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", spec.job(),
                     "': DDP keeps parameters and optimizer state on the workers; "
                     "shard-server checkpoints cover zero1 and zero2 jobs"));
  }
  absl::StatusOr<v1::JobSpec> saved = JobSpecFromJson(manifest.spec_json);
  if (!saved.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint of job '", manifest.job, "' step ",
                                            manifest.step, " has an unreadable spec"));
  }
  const std::string diff = DiffRestorableSpecs(*saved, spec);
  if (!diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", spec.job(), "' cannot restore the checkpoint of step ", manifest.step,
                     ": its model, strategy or optimizer differ: ", diff));
  }
  TESSEL_ASSIGN_OR_RETURN(const Layout layout, ValidateJobSpec(spec));
  if (layout.num_params() != manifest.num_params) {
    return absl::FailedPreconditionError("checkpoint parameter count differs from the layout");
  }
  absl::Status skips = ValidateSkips(manifest.tensor_skips,
                                     static_cast<int>(layout.tensors().size()), manifest.step);
  if (!skips.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint of job '", manifest.job, "' step ",
                                            manifest.step, ": ", skips.message()));
  }
  return absl::OkStatus();
}

}  // namespace tessel
