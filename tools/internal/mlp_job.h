// The demo's training job: an MLP classifier on a generated data set, with
// everything that must be identical between a worker process and the
// single-process reference (model, data, batches, initial parameters).
//
// Example:
//   MlpJob job(MlpJobFromFlags());
//   std::vector<float> params(job.model().num_params());
//   job.Init(params.data());
//   float loss = job.Gradients(params.data(), step, rank, world, grads.data(), {});
#ifndef TESSEL_TOOLS_INTERNAL_MLP_JOB_H_
#define TESSEL_TOOLS_INTERNAL_MLP_JOB_H_

#include <functional>
#include <optional>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "model/dataset.h"
#include "model/mlp.h"

ABSL_DECLARE_FLAG(std::string, layers);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(int, samples);
ABSL_DECLARE_FLAG(uint64_t, data_seed);
ABSL_DECLARE_FLAG(uint64_t, init_seed);

namespace tessel {

struct MlpJobConfig {
  std::vector<int> layers = {64, 512, 512, 10};
  int batch = 64;  // per rank
  int samples = 32768;
  uint64_t data_seed = 1;
  uint64_t init_seed = 2;
  std::string device = "cpu";  // --device: cpu, cuda or host (gpu/device.h)
};

absl::StatusOr<MlpJobConfig> MlpJobFromFlags();
std::vector<std::string> ForwardedMlpFlags();

class MlpJob {
 public:
  explicit MlpJob(const MlpJobConfig& config);

  const model::Mlp& model() const { return model_; }
  const MlpJobConfig& config() const { return config_; }
  std::vector<TensorDesc> Tensors() const;
  void Init(float* params) const;
  // Rank `rank`'s gradient of global batch `step`; returns its mean loss.
  float Gradients(const float* params, int64_t step, int rank, int world, float* grads,
                  const std::function<void(size_t)>& on_tensor_ready) const;
  // Gradient of micro-batch `micro` of `micro_batches` (equal contiguous
  // slices of the rank's batch); returns its mean loss.
  float MicroGradients(const float* params, int64_t step, int rank, int world, int micro,
                       int micro_batches, float* grads) const;
  // Rank `rank`'s rows of global batch `step`.
  model::Dataset Batch(int64_t step, int rank, int world) const;
  double TestAccuracy(const float* params) const;
  double TrainAccuracy(const float* params) const;

 private:
  MlpJobConfig config_;
  model::Mlp model_;
  model::DatasetSplit data_;
};

// Single-process data-parallel training: each step averages the `world`
// ranks' gradients in rank order and applies the optimizer, exactly as the
// shard servers do. Returns the final parameters.
// With `half` (mixed precision) the workers compute with the fp32 masters
// rounded to half and send gradients rounded to half, and the result is the
// masters rounded to half, as a mixed-precision worker holds them.
// `half_mean` (DDP under mixed precision): the mean itself is rounded to half
// before the update, as DDP's servers return it in half.
// `init_ulps`: every initial parameter is first moved that many ulps up (a
// rounding-sized change, to measure how far rounding alone carries a run).
std::vector<float> TrainReference(const MlpJob& job, const OptimizerParams& optimizer, int world,
                                  int steps, std::optional<HalfType> half = std::nullopt,
                                  int micro_batches = 1, bool half_mean = false, int init_ulps = 0);

// Rounds every element to `half` and back (the identity without `half`).
void RoundTrip(std::optional<HalfType> half, float* data, size_t n);

// max_i |a_i - b_i| / max(|b_i|, 1e-12); +inf when sizes differ.
double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_MLP_JOB_H_
