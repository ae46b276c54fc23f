#include "worker/train_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

ABSL_FLAG(std::string, strategy, "zero2",
          "ddp, zero1, zero2 or fsdp (hybrid DPxTPxPP: tessel-hybrid-train)");
ABSL_FLAG(std::string, optimizer, "adam",
          "sgd, adam, adamw, rmsprop or adagrad (torch.optim semantics)");
ABSL_FLAG(double, lr, 1e-3, "learning rate");
ABSL_FLAG(double, momentum, 0.0, "SGD and RMSprop momentum");
ABSL_FLAG(double, dampening, 0.0, "SGD dampening");
ABSL_FLAG(bool, nesterov, false, "SGD Nesterov momentum (needs momentum > 0, dampening 0)");
ABSL_FLAG(double, weight_decay, 0.0, "weight decay (L2 for sgd/adam, decoupled for adamw)");
ABSL_FLAG(double, beta1, 0.9, "Adam/AdamW beta1");
ABSL_FLAG(double, beta2, 0.999, "Adam/AdamW beta2");
ABSL_FLAG(double, eps, -1,
          "epsilon of Adam/AdamW/RMSprop/Adagrad; -1 = torch's default (1e-10 for adagrad, "
          "else 1e-8)");
ABSL_FLAG(double, alpha, 0.99, "RMSprop smoothing constant");
ABSL_FLAG(bool, centered, false, "RMSprop: centered (normalise by the gradient's variance)");
ABSL_FLAG(double, lr_decay, 0.0, "Adagrad learning-rate decay");
ABSL_FLAG(double, initial_accumulator_value, 0.0, "Adagrad initial value of the square sums");
ABSL_FLAG(int, steps, 1500, "training steps");
ABSL_FLAG(int, micro_batches, 1,
          "gradient accumulation: split each worker's batch into this many micro-batches and "
          "push their mean (the batch must divide evenly)");
ABSL_FLAG(std::string, aggregation, "auto",
          "how the workers of one host send gradients: host = they sum them first (in rank "
          "order), push one partial sum per bucket and pull once per host (docs/hierarchical.md); "
          "flat = each worker pushes and pulls itself; auto = host when some host runs two or "
          "more workers of the job and some shard server is on another host");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32, or mixed precision fp16 / bf16 (half on the wire and on workers, fp32 "
          "masters and optimizer state on the servers; zero1 and zero2)");
ABSL_FLAG(int64_t, bucket_bytes, 4 << 20, "data-path bucket size in bytes");
ABSL_FLAG(double, topk_ratio, 0,
          "top-k gradient compression with error feedback: 0 = off (bitwise exact); r in (0, 1] "
          "pushes the largest ceil(r * n) entries of each bucket of n (index + value: 8 bytes "
          "each) and keeps the rest for later steps; NOT bitwise equal to single-process "
          "training; ddp, zero1, zero2 with fp32 only (docs/compression.md)");
ABSL_FLAG(uint64_t, shuffle_seed, 0,
          "testing: push buckets in a random order with random pauses (0 = off)");

namespace tessel {

absl::StatusOr<OptimizerParams> OptimizerFromFlags() {
  OptimizerParams p;
  const std::string kind = absl::AsciiStrToLower(absl::GetFlag(FLAGS_optimizer));
  if (kind == "sgd") {
    p.kind = OptimizerParams::Kind::kSgd;
  } else if (kind == "adam") {
    p.kind = OptimizerParams::Kind::kAdam;
  } else if (kind == "adamw") {
    p.kind = OptimizerParams::Kind::kAdamW;
  } else if (kind == "rmsprop") {
    p.kind = OptimizerParams::Kind::kRmsprop;
  } else if (kind == "adagrad") {
    p.kind = OptimizerParams::Kind::kAdagrad;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer must be sgd, adam, adamw, rmsprop or adagrad; got '", kind, "'"));
  }
  p.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  p.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  p.dampening = static_cast<float>(absl::GetFlag(FLAGS_dampening));
  p.nesterov = absl::GetFlag(FLAGS_nesterov);
  p.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  p.beta1 = static_cast<float>(absl::GetFlag(FLAGS_beta1));
  p.beta2 = static_cast<float>(absl::GetFlag(FLAGS_beta2));
  const double eps = absl::GetFlag(FLAGS_eps);
  p.eps = eps >= 0 ? static_cast<float>(eps)
                   : (p.kind == OptimizerParams::Kind::kAdagrad ? 1e-10f : 1e-8f);
  p.alpha = static_cast<float>(absl::GetFlag(FLAGS_alpha));
  p.centered = absl::GetFlag(FLAGS_centered);
  p.lr_decay = static_cast<float>(absl::GetFlag(FLAGS_lr_decay));
  p.initial_accumulator_value = static_cast<float>(absl::GetFlag(FLAGS_initial_accumulator_value));
  TESSEL_RETURN_IF_ERROR(ValidateOptimizerParams(p));
  return p;
}

absl::StatusOr<Strategy> StrategyFromFlags() {
  const std::string name = absl::AsciiStrToLower(absl::GetFlag(FLAGS_strategy));
  if (name == "hybrid") {
    return absl::UnimplementedError(absl::StrCat(
        "--strategy=", absl::GetFlag(FLAGS_strategy),
        " runs through tessel-hybrid-train (--dp --tp --pp --micro_batches); this tool takes "
        "ddp, zero1, zero2 or fsdp"));
  }
  return StrategyFromName(name);
}

absl::StatusOr<std::optional<HalfType>> PrecisionFromFlags() {
  const std::string p = absl::AsciiStrToLower(absl::GetFlag(FLAGS_precision));
  if (p == "fp32") return std::optional<HalfType>();
  if (p == "fp16") return std::optional<HalfType>(HalfType::kF16);
  if (p == "bf16") return std::optional<HalfType>(HalfType::kBF16);
  return absl::InvalidArgumentError(
      absl::StrCat("--precision must be fp32, fp16 or bf16; got '", p, "'"));
}

Precision PrecisionOf(std::optional<HalfType> half) {
  if (!half) return Precision::kFp32;
  return *half == HalfType::kF16 ? Precision::kFp16 : Precision::kBf16;
}

std::vector<std::string> ForwardedTrainFlags() {
  // Full precision: the launcher's reference must parse the very same values.
  auto d = [](double v) { return absl::StrFormat("%.17g", v); };
  return {
      absl::StrCat("--strategy=", absl::GetFlag(FLAGS_strategy)),
      absl::StrCat("--optimizer=", absl::GetFlag(FLAGS_optimizer)),
      absl::StrCat("--lr=", d(absl::GetFlag(FLAGS_lr))),
      absl::StrCat("--momentum=", d(absl::GetFlag(FLAGS_momentum))),
      absl::StrCat("--dampening=", d(absl::GetFlag(FLAGS_dampening))),
      absl::StrCat("--nesterov=", absl::GetFlag(FLAGS_nesterov) ? "true" : "false"),
      absl::StrCat("--weight_decay=", d(absl::GetFlag(FLAGS_weight_decay))),
      absl::StrCat("--beta1=", d(absl::GetFlag(FLAGS_beta1))),
      absl::StrCat("--beta2=", d(absl::GetFlag(FLAGS_beta2))),
      absl::StrCat("--eps=", d(absl::GetFlag(FLAGS_eps))),
      absl::StrCat("--alpha=", d(absl::GetFlag(FLAGS_alpha))),
      absl::StrCat("--centered=", absl::GetFlag(FLAGS_centered) ? "true" : "false"),
      absl::StrCat("--lr_decay=", d(absl::GetFlag(FLAGS_lr_decay))),
      absl::StrCat("--initial_accumulator_value=",
                   d(absl::GetFlag(FLAGS_initial_accumulator_value))),
      absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
      absl::StrCat("--precision=", absl::GetFlag(FLAGS_precision)),
      absl::StrCat("--micro_batches=", absl::GetFlag(FLAGS_micro_batches)),
      absl::StrCat("--bucket_bytes=", absl::GetFlag(FLAGS_bucket_bytes)),
      absl::StrCat("--topk_ratio=", d(absl::GetFlag(FLAGS_topk_ratio))),
      absl::StrCat("--ucx_tls=", absl::GetFlag(FLAGS_ucx_tls)),
      absl::StrCat("--ucx_zero_copy=", absl::GetFlag(FLAGS_ucx_zero_copy) ? "true" : "false"),
      absl::StrCat("--shuffle_seed=", absl::GetFlag(FLAGS_shuffle_seed)),
      absl::StrCat("--aggregation=", absl::GetFlag(FLAGS_aggregation)),
  };
}

absl::StatusOr<Aggregation> AggregationFromFlags() {
  auto a = AggregationFromName(absl::GetFlag(FLAGS_aggregation));
  if (!a.ok())
    return absl::InvalidArgumentError(absl::StrCat("--aggregation: ", a.status().message()));
  return *a;
}

}  // namespace tessel
