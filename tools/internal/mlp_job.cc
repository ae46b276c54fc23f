#include "tools/internal/mlp_job.h"

#include <cmath>
#include <limits>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/reduce.h"

ABSL_FLAG(std::string, layers, "64,512,512,10",
          "MLP layer sizes: inputs, hidden..., classes (comma-separated)");
ABSL_FLAG(int, batch, 64, "samples per worker per step");
ABSL_FLAG(int, samples, 32768, "size of the generated data set (80% train, 20% test)");
ABSL_FLAG(uint64_t, data_seed, 1, "seed of the generated data set");
ABSL_FLAG(uint64_t, init_seed, 2, "seed of the initial parameters");
ABSL_FLAG(std::string, device, "cpu",
          "where each worker computes the MLP: cpu; cuda (CUDA device 0, cuBLAS; without a "
          "usable GPU the worker says why and computes on the CPU); host (the device code path "
          "emulated on the CPU, for tests: the same results as cpu, bit for bit). docs/gpu.md");

namespace tessel {

absl::StatusOr<MlpJobConfig> MlpJobFromFlags() {
  MlpJobConfig c;
  c.layers.clear();
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1 || v > 65536) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers must be comma-separated sizes in [1, 65536], e.g. 64,256,10; got '",
          absl::GetFlag(FLAGS_layers), "'"));
    }
    c.layers.push_back(v);
  }
  if (c.layers.size() < 2 || c.layers.back() < 2) {
    return absl::InvalidArgumentError("--layers needs at least inputs and >= 2 classes");
  }
  c.batch = absl::GetFlag(FLAGS_batch);
  c.samples = absl::GetFlag(FLAGS_samples);
  if (c.batch < 1 || c.batch > 1 << 20) return absl::InvalidArgumentError("--batch must be >= 1");
  if (c.samples < 10) return absl::InvalidArgumentError("--samples must be >= 10");
  c.data_seed = absl::GetFlag(FLAGS_data_seed);
  c.init_seed = absl::GetFlag(FLAGS_init_seed);
  c.device = absl::GetFlag(FLAGS_device);
  if (c.device != "cpu" && c.device != "cuda" && c.device != "host") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu, cuda or host; got '", c.device, "'"));
  }
  return c;
}

std::vector<std::string> ForwardedMlpFlags() {
  return {absl::StrCat("--layers=", absl::GetFlag(FLAGS_layers)),
          absl::StrCat("--batch=", absl::GetFlag(FLAGS_batch)),
          absl::StrCat("--samples=", absl::GetFlag(FLAGS_samples)),
          absl::StrCat("--data_seed=", absl::GetFlag(FLAGS_data_seed)),
          absl::StrCat("--init_seed=", absl::GetFlag(FLAGS_init_seed)),
          absl::StrCat("--device=", absl::GetFlag(FLAGS_device))};
}

MlpJob::MlpJob(const MlpJobConfig& config)
    : config_(config),
      model_(config.layers),
      data_(model::Split(model::MakeClusters(config.samples, config.layers.front(),
                                             config.layers.back(), config.data_seed),
                         static_cast<size_t>(config.samples) * 4 / 5)) {}

std::vector<TensorDesc> MlpJob::Tensors() const {
  std::vector<TensorDesc> out;
  for (const auto& t : model_.tensors()) out.push_back({t.name, t.shape});
  return out;
}

void MlpJob::Init(float* params) const { model_.Init(params, config_.init_seed); }

float MlpJob::Gradients(const float* params, int64_t step, int rank, int world, float* grads,
                        const std::function<void(size_t)>& on_tensor_ready) const {
  model::Dataset b = model::Batch(data_.train, step, rank, world, config_.batch);
  if (on_tensor_ready) {
    return model_.LossAndGrad(params, b.x.data(), b.y.data(), config_.batch, grads,
                              on_tensor_ready);
  }
  return model_.LossAndGrad(params, b.x.data(), b.y.data(), config_.batch, grads);
}

float MlpJob::MicroGradients(const float* params, int64_t step, int rank, int world, int micro,
                             int micro_batches, float* grads) const {
  model::Dataset b = model::Batch(data_.train, step, rank, world, config_.batch);
  const int rows = config_.batch / micro_batches;
  const int features = b.num_features;
  return model_.LossAndGrad(params, b.x.data() + static_cast<size_t>(micro) * rows * features,
                            b.y.data() + static_cast<size_t>(micro) * rows, rows, grads);
}

model::Dataset MlpJob::Batch(int64_t step, int rank, int world) const {
  return model::Batch(data_.train, step, rank, world, config_.batch);
}

double MlpJob::TestAccuracy(const float* params) const {
  return model_.Accuracy(params, data_.test);
}

double MlpJob::TrainAccuracy(const float* params) const {
  return model_.Accuracy(params, data_.train);
}

void RoundTrip(std::optional<HalfType> half, float* data, size_t n) {
  if (!half) return;
  std::vector<uint16_t> h(n);
  FloatToHalf(*half, data, h.data(), n);
  HalfToFloat(*half, h.data(), data, n);
}

std::vector<float> TrainReference(const MlpJob& job, const OptimizerParams& optimizer, int world,
                                  int steps, std::optional<HalfType> half, int micro_batches,
                                  bool half_mean, int init_ulps) {
  const size_t n = job.model().num_params();
  std::vector<float> params(n), mean(n), working(n);
  job.Init(params.data());
  for (int u = 0; u < init_ulps; ++u) {
    for (float& p : params) p = std::nextafter(p, std::numeric_limits<float>::infinity());
  }
  std::vector<std::vector<float>> grads(world, std::vector<float>(n));
  std::vector<std::vector<float>> state(StateSlots(optimizer), std::vector<float>(n, 0.f));
  float* state_ptrs[kMaxStateSlots] = {};
  for (size_t k = 0; k < state.size(); ++k) state_ptrs[k] = state[k].data();
  InitState(optimizer, state_ptrs, n);
  std::vector<const float*> srcs(world);
  for (int step = 0; step < steps; ++step) {
    working = params;
    RoundTrip(half, working.data(), n);
    std::vector<float> micro(micro_batches > 1 ? n : 0);
    for (int r = 0; r < world; ++r) {
      if (micro_batches > 1) {  // as Worker::AccumulateGradients: sum in order, then divide
        for (int m = 0; m < micro_batches; ++m) {
          job.MicroGradients(working.data(), step, r, world, m, micro_batches,
                             m == 0 ? grads[r].data() : micro.data());
          if (m > 0) {
            for (size_t i = 0; i < n; ++i) grads[r][i] += micro[i];
          }
        }
        for (float& g : grads[r]) g /= static_cast<float>(micro_batches);
      } else {
        job.Gradients(working.data(), step, r, world, grads[r].data(), {});
      }
      RoundTrip(half, grads[r].data(), n);
      srcs[r] = grads[r].data();
    }
    ReduceMean(srcs.data(), world, mean.data(), n);
    if (half_mean) RoundTrip(half, mean.data(), n);
    ApplyUpdate(optimizer, step + 1, params.data(), mean.data(), state_ptrs, n);
  }
  RoundTrip(half, params.data(), n);
  return params;
}

double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    const double rel = d / std::max(std::fabs(static_cast<double>(b[i])), 1e-12);
    if (d != 0 && rel > worst) worst = rel;
    if (std::isnan(a[i]) != std::isnan(b[i])) return std::numeric_limits<double>::infinity();
  }
  return worst;
}

}  // namespace tessel
