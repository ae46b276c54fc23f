// TrainState: a job's whole training state (parameters, optimizer state and
// step) as one portable blob, what Worker::Serialize returns and
// Worker::Deserialize takes. Unlike the seeds' Serialize, the blob does not
// depend on the world size, the shard count or the strategy: it is the flat
// parameter vector in layout order and the optimizer's state slots over it,
// so a state saved from a 4-worker ZeRO-2 run on 3 servers loads into a
// 2-worker DDP run.
//
// Format (little-endian), version 1:
//   "TESSELTS"  8 bytes magic
//   u32         format version (1)
//   u32         header length H (at most 16 MiB)
//   H bytes     JSON header: {"job", "step", "num_params", "state_slots",
//               "optimizer" (kind name), "spec" (the JobSpec as JSON),
//               "tensors": [{"name", "shape"}...]}
//   P floats    parameters (fp32 masters)
//   K*P floats  optimizer state, slot by slot
//   u64         XXH64 of every byte before it
// Decoding checks every field and size and the checksum before returning.
//
// Pure logic: no I/O, no threads.
//
// Example:
//   TrainState s{...};
//   TESSEL_ASSIGN_OR_RETURN(std::string blob, EncodeTrainState(s));
//   absl::StatusOr<TrainState> back = DecodeTrainState(blob);
#ifndef TESSEL_WORKER_TRAIN_STATE_H_
#define TESSEL_WORKER_TRAIN_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/shard.pb.h"

namespace tessel {

inline constexpr char kTrainStateMagic[] = "TESSELTS";
inline constexpr uint32_t kTrainStateVersion = 1;

struct TrainState {
  v1::JobSpec spec;  // the job it came from (tensors, optimizer, strategy, ...)
  int64_t step = 0;  // optimizer steps applied
  std::vector<float> params;
  std::vector<std::vector<float>> state;  // StateSlots(optimizer) slots of params.size()
  // Per tensor, the steps that left it without an update (core/tensor_steps.h);
  // empty if none did. "tensor_skips" in the header, only when not empty.
  std::vector<int64_t> tensor_skips;
};

// InvalidArgument if the spec cannot be written as JSON (protobuf's words);
// nothing is encoded then, rather than a blob that fails to load later.
absl::StatusOr<std::string> EncodeTrainState(const TrainState& state);
absl::StatusOr<TrainState> DecodeTrainState(absl::string_view bytes);

// Whether `state` can be loaded into a job with `spec`: the same tensors
// (names and shapes, in order) and the same optimizer kind (its state slots
// mean the same). Strategy, world size, shard count, precision and the
// optimizer's hyperparameters may differ: the new spec's apply from then on.
absl::Status CheckTrainStateFits(const TrainState& state, const v1::JobSpec& spec);

}  // namespace tessel

#endif  // TESSEL_WORKER_TRAIN_STATE_H_
