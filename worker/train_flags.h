// Training flags shared by every binary that trains or launches training
// (tessel-train, tessel-hybrid-train, tessel-demo, tessel-replay, the
// benchmarks): one definition, so a launcher forwards exactly what a worker
// parses. worker/worker_flags.h turns them, with a worker process's own
// flags, into WorkerOptions.
#ifndef TESSEL_WORKER_TRAIN_FLAGS_H_
#define TESSEL_WORKER_TRAIN_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/optimizer_params.h"
#include "core/precision.h"
#include "worker/options.h"

ABSL_DECLARE_FLAG(std::string, strategy);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(double, dampening);
ABSL_DECLARE_FLAG(bool, nesterov);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(double, beta1);
ABSL_DECLARE_FLAG(double, beta2);
ABSL_DECLARE_FLAG(double, eps);
ABSL_DECLARE_FLAG(double, alpha);
ABSL_DECLARE_FLAG(bool, centered);
ABSL_DECLARE_FLAG(double, lr_decay);
ABSL_DECLARE_FLAG(double, initial_accumulator_value);
ABSL_DECLARE_FLAG(int, steps);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(int, micro_batches);
ABSL_DECLARE_FLAG(int64_t, bucket_bytes);
ABSL_DECLARE_FLAG(double, topk_ratio);
// Defined with the other --ucx_* flags in transport/ucx/ucx_flags.cc
// (//transport:ucx_flags, which this library links); declared here too for
// the launchers that forward them.
ABSL_DECLARE_FLAG(std::string, ucx_tls);
ABSL_DECLARE_FLAG(bool, ucx_zero_copy);
ABSL_DECLARE_FLAG(uint64_t, shuffle_seed);

namespace tessel {

// Optimizer from --optimizer and its hyper-parameter flags, validated.
absl::StatusOr<OptimizerParams> OptimizerFromFlags();
// --strategy (ddp, zero1, zero2, fsdp); "hybrid" is refused with a pointer
// to tessel-hybrid-train.
absl::StatusOr<Strategy> StrategyFromFlags();
// --precision: nullopt for fp32, else the half type.
absl::StatusOr<std::optional<HalfType>> PrecisionFromFlags();
Precision PrecisionOf(std::optional<HalfType> half);
// --aggregation (auto, flat, host).
absl::StatusOr<Aggregation> AggregationFromFlags();
// The shared flags as command-line arguments, to forward to workers.
std::vector<std::string> ForwardedTrainFlags();

}  // namespace tessel

#endif  // TESSEL_WORKER_TRAIN_FLAGS_H_
