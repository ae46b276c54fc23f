#include "worker/options.h"

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

absl::Status ValidateWorkerOptions(const WorkerOptions& o) {
  if (o.registry.empty()) return absl::InvalidArgumentError("WorkerOptions.registry is empty");
  if (o.job.empty()) return absl::InvalidArgumentError("WorkerOptions.job is empty");
  if (o.world_size < 1 || o.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size must be in [1, ", kMaxWorldSize, "], got ", o.world_size));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside [0, ", o.world_size, ")"));
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
  if (o.elastic_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("elastic_grace must be >= 0");
  }
  return ValidateOptimizerParams(o.optimizer);
}

}  // namespace tessel
