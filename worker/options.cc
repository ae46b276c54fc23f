#include "worker/options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/layout.h"

namespace tessel {
absl::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kDdp:
      return "ddp";
    case Strategy::kZero1:
      return "zero1";
    case Strategy::kZero2:
      return "zero2";
    case Strategy::kFsdp:
      return "fsdp";
  }
  return "?";
}

absl::StatusOr<Strategy> StrategyFromName(absl::string_view name) {
  for (Strategy s : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2, Strategy::kFsdp}) {
    if (name == StrategyName(s)) return s;
  }
  if (name == "zero3") return Strategy::kFsdp;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown strategy '", name, "'; expected ddp, zero1, zero2, fsdp or hybrid"));
}

absl::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

absl::StatusOr<Precision> PrecisionFromName(absl::string_view name) {
  for (Precision p : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (fp32, fp16, bf16)"));
}

std::optional<HalfType> HalfTypeOf(Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return HalfType::kF16;
    case Precision::kBf16:
      return HalfType::kBF16;
    case Precision::kFp32:
      break;
  }
  return std::nullopt;
}

absl::string_view AggregationName(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kAuto:
      return "auto";
    case Aggregation::kFlat:
      return "flat";
    case Aggregation::kHost:
      return "host";
  }
  return "?";
}

absl::StatusOr<Aggregation> AggregationFromName(absl::string_view name) {
  for (Aggregation a : {Aggregation::kAuto, Aggregation::kFlat, Aggregation::kHost}) {
    if (name == AggregationName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown aggregation '", name, "' (auto, flat, host)"));
}

absl::Status ValidateWorkerOptions(const WorkerOptions& o) {
  if (o.registry.empty()) return absl::InvalidArgumentError("WorkerOptions.registry is empty");
  if (o.job.empty()) return absl::InvalidArgumentError("WorkerOptions.job is empty");
  if (absl::Status name = ValidateJobName(o.job); !name.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("WorkerOptions.job: ", name.message()));
  }
  if (o.world_size < 1 || o.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be in [1, ", kMaxWorldSize, "], got ", o.world_size));
  }
  if (o.num_servers < 0) return absl::InvalidArgumentError("num_servers must be >= 0");
  if (o.elastic_min_workers < 0 || o.elastic_min_workers > o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("elastic_min_workers must be in [0, ",
                                                   o.world_size, "] (0 = off), got ",
                                                   o.elastic_min_workers));
  }
  if (o.elastic_min_workers > 0 && !o.recovery) {
    return absl::InvalidArgumentError(
        "elastic_min_workers needs recovery (WorkerOptions.recovery / --recover)");
  }
  if (o.straggler_policy == WorkerOptions::StragglerPolicy::kEvict) {
    if (o.elastic_min_workers < 1) {
      return absl::InvalidArgumentError(
          "straggler_policy evict needs elastic_min_workers >= 1 (--elastic_min_workers, with "
          "--recover): the job goes on without the evicted worker through the elastic shrink");
    }
    if (o.straggler_evict_after <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("straggler_evict_after must be > 0");
    }
  }
  if (o.elastic_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("elastic_grace must be >= 0");
  }
  if (o.elastic_max_workers != 0) {
    if (o.elastic_max_workers < o.world_size || o.elastic_max_workers > kMaxWorldSize) {
      return absl::InvalidArgumentError(
          absl::StrCat("elastic_max_workers must be 0 (off) or in [world_size=", o.world_size, ", ",
                       kMaxWorldSize, "], got ", o.elastic_max_workers));
    }
    if (!o.recovery) {
      return absl::InvalidArgumentError(
          "elastic_max_workers needs recovery (WorkerOptions.recovery / --recover): a job grows "
          "through a recovery at a checkpoint boundary");
    }
    if (o.checkpoint.every_steps <= 0) {
      return absl::InvalidArgumentError(
          "elastic_max_workers needs checkpoint.every_steps > 0 (--checkpoint_every_steps): new "
          "workers are admitted at checkpoint boundaries");
    }
  }
  const int max_rank = std::max(o.world_size, o.elastic_max_workers);
  if (o.rank < 0 || o.rank >= max_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside [0, ", max_rank, ")",
                     o.elastic_max_workers > 0
                         ? " (elastic_max_workers: ranks from world_size up join the running job)"
                         : ""));
  }
  return ValidateOptimizerParams(o.optimizer);
}

}  // namespace tessel
