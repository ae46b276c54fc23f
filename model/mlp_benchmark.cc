// Time of one training step's compute for the demo model, {64, 256, 256, 10}.
//
// BM_Loss (forward only) is the baseline measured in the same run:
// LossAndGrad does that forward plus a backward of about twice its work, so it
// should take about three times as long. The GFLOP/s counter counts 2 flops
// per multiply-add of the matrix products.
//
// Run: bazel run //model:mlp_benchmark

#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "model/dataset.h"
#include "model/mlp.h"

namespace tessel::model {
namespace {

const std::vector<int> kSizes = {64, 256, 256, 10};

// Multiply-adds of one forward pass per row.
double ForwardMacsPerRow() {
  double macs = 0;
  for (size_t l = 0; l + 1 < kSizes.size(); ++l) {
    macs += static_cast<double>(kSizes[l]) * kSizes[l + 1];
  }
  return macs;
}

// Backward: the weight gradients (as many as forward) and the input gradients
// of every layer but the first.
double BackwardMacsPerRow() {
  return 2 * ForwardMacsPerRow() - static_cast<double>(kSizes[0]) * kSizes[1];
}

void BM_Loss(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const Mlp model(kSizes);
  std::vector<float> params(model.num_params());
  model.Init(params.data(), 0);
  const Dataset b = Batch(MakeClusters(4096, 64, 10, 0), 0, 0, 1, batch);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.Loss(params.data(), b.x.data(), b.y.data(), batch));
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * batch * ForwardMacsPerRow(),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LossAndGrad(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const Mlp model(kSizes);
  std::vector<float> params(model.num_params()), grads(model.num_params());
  model.Init(params.data(), 0);
  const Dataset b = Batch(MakeClusters(4096, 64, 10, 0), 0, 0, 1, batch);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        model.LossAndGrad(params.data(), b.x.data(), b.y.data(), batch, grads.data()));
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2e-9 * batch * (ForwardMacsPerRow() + BackwardMacsPerRow()),
                         benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Loss)->Arg(32)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LossAndGrad)->Arg(32)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessel::model

BENCHMARK_MAIN();
