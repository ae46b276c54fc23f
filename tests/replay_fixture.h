// Shared by the tests that drive tessel-replay: generated inputs on disk, the
// single-process reference they must equal, and a command runner.
#ifndef TESSEL_TESTS_REPLAY_FIXTURE_H_
#define TESSEL_TESTS_REPLAY_FIXTURE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "core/precision.h"

namespace tessel {

struct ReplayInputs {
  std::string dir;  // holds init.npy and step{k}_rank{r}.npy
  std::vector<float> init;
  std::vector<std::vector<std::vector<float>>> grads;  // [step][rank][param]
  // With micro_batches > 1 also step{k}_rank{r}_micro{m}.npy (hybrid replay):
  // [step][rank][micro][param].
  std::vector<std::vector<std::vector<std::vector<float>>>> micro;
};

// Normal(0, 1) initial parameters and Normal(0, 0.1) gradients, written as
// .npy files the way tessel-replay reads them (the micro-batch files drawn
// after the others, so the others do not depend on micro_batches).
ReplayInputs MakeReplayInputs(const std::string& prefix, size_t params, int steps, int ranks,
                              uint32_t seed, int micro_batches = 1);

// Single-process training: each step the mean of ranks [0, workers) in rank
// order, then the optimizer, exactly as the shard servers do.
// With `half`, gradients are rounded to half before the mean and the result
// is the fp32 masters rounded to half (what a mixed-precision worker holds).
// With micro_batches > 1 each rank's gradient is the mean of its micro-batch
// files (summed in order, then divided by the count, as
// Worker::AccumulateGradients), rounded to half after that.
// `half_mean` (DDP) rounds the mean to half as well before the update.
std::vector<float> ReplayReference(const ReplayInputs& in, const OptimizerParams& opt, int workers,
                                   std::optional<HalfType> half = std::nullopt,
                                   int micro_batches = 1, bool half_mean = false);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};
CommandResult RunCommand(const std::string& command);

}  // namespace tessel

#endif  // TESSEL_TESTS_REPLAY_FIXTURE_H_
