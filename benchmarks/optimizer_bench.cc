// Throughput of the optimizer kernels over 16M fp32 parameters (single
// thread), against memory-bandwidth baselines measured in the same run.
//
// Bytes counted per parameter (SetBytesProcessed):
//   Adam ApplyUpdate:        28 = read param, grad, exp_avg, exp_avg_sq (16)
//                                 + write param, exp_avg, exp_avg_sq (12)
//   Adam ReduceAndApply w=2: 32 = read 2 gradient sources (8) + read/write
//                                 param, exp_avg, exp_avg_sq (24)
//   Adam ReduceMean, then ApplyUpdate (unfused), w=2: counted as the fused
//                            call (32), so the two times compare directly;
//                            it really moves 8 more (mean written, read back).
//   Baseline Copy:            8 = read 4 + write 4 (memcpy)
//   Baseline AdamShaped:     28 = Adam's traffic, one add per array, so the
//                                 gap to Adam ApplyUpdate is the cost of math.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/optimizer.h"

namespace tessel {
namespace {

constexpr size_t kParams = size_t{16} << 20;  // 16M

// Buffers for all benchmarks, allocated and touched once.
struct Buffers {
  std::vector<float> params, grad, grad2, mean, exp_avg, exp_avg_sq;
  Buffers()
      : params(kParams),
        grad(kParams),
        grad2(kParams),
        mean(kParams),
        exp_avg(kParams),
        exp_avg_sq(kParams) {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t i = 0; i < kParams; ++i) {
      params[i] = dist(rng);
      grad[i] = dist(rng) * 1e-2f;
      grad2[i] = dist(rng) * 1e-2f;
    }
  }
};

Buffers& GetBuffers() {
  static Buffers* buffers = new Buffers();
  return *buffers;
}

OptimizerParams AdamParams() {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kAdam;
  p.lr = 1e-3f;
  p.weight_decay = 0.01f;
  return p;
}

void BM_AdamApplyUpdate(benchmark::State& state) {
  Buffers& b = GetBuffers();
  const OptimizerParams p = AdamParams();
  float* slots[] = {b.exp_avg.data(), b.exp_avg_sq.data()};
  int64_t step = 0;
  for (auto _ : state) {
    ApplyUpdate(p, ++step, b.params.data(), b.grad.data(), slots, kParams);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * 28);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}
BENCHMARK(BM_AdamApplyUpdate)->Unit(benchmark::kMillisecond);

void BM_AdamReduceAndApply(benchmark::State& state) {
  Buffers& b = GetBuffers();
  const OptimizerParams p = AdamParams();
  float* slots[] = {b.exp_avg.data(), b.exp_avg_sq.data()};
  const float* srcs[] = {b.grad.data(), b.grad2.data()};
  const int w = static_cast<int>(state.range(0));
  int64_t step = 0;
  for (auto _ : state) {
    ReduceAndApply(p, ++step, b.params.data(), srcs, w, slots, kParams);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * (4 * w + 24));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}
BENCHMARK(BM_AdamReduceAndApply)->Arg(2)->ArgName("w")->Unit(benchmark::kMillisecond);

void BM_AdamReduceMeanThenApply(benchmark::State& state) {
  Buffers& b = GetBuffers();
  const OptimizerParams p = AdamParams();
  float* slots[] = {b.exp_avg.data(), b.exp_avg_sq.data()};
  const float* srcs[] = {b.grad.data(), b.grad2.data()};
  const int w = static_cast<int>(state.range(0));
  int64_t step = 0;
  for (auto _ : state) {
    ReduceMean(srcs, w, b.mean.data(), kParams);
    ApplyUpdate(p, ++step, b.params.data(), b.mean.data(), slots, kParams);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * (4 * w + 24));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}
BENCHMARK(BM_AdamReduceMeanThenApply)->Arg(2)->ArgName("w")->Unit(benchmark::kMillisecond);

void BM_BaselineCopy(benchmark::State& state) {
  Buffers& b = GetBuffers();
  for (auto _ : state) {
    std::memcpy(b.exp_avg.data(), b.grad.data(), kParams * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * 8);
}
BENCHMARK(BM_BaselineCopy)->Unit(benchmark::kMillisecond);

void BM_BaselineAdamShaped(benchmark::State& state) {
  Buffers& b = GetBuffers();
  float* __restrict p = b.params.data();
  const float* __restrict g = b.grad.data();
  float* __restrict m = b.exp_avg.data();
  float* __restrict v = b.exp_avg_sq.data();
  for (auto _ : state) {
    for (size_t i = 0; i < kParams; ++i) {
      const float gi = g[i];
      p[i] += gi;
      m[i] += gi;
      v[i] += gi;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * 28);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}
BENCHMARK(BM_BaselineAdamShaped)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel

BENCHMARK_MAIN();
