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
//   RMSprop ApplyUpdate:     20 = read param, grad, square_avg (12)
//                                 + write param, square_avg (8)
//   RMSprop centered, momentum, weight decay ApplyUpdate:
//                            36 = read param, grad, square_avg,
//                                 momentum_buffer, grad_avg (20)
//                                 + write all but grad (16)
//   Adagrad ApplyUpdate:     20 = read param, grad, sum (12) + write param, sum (8)
//   Baseline Copy:            8 = read 4 + write 4 (memcpy)
//   Baseline AdamShaped:     28 = Adam's traffic, one add per array, so the
//                                 gap to Adam ApplyUpdate is the cost of math.
//   Baseline StateShaped/slots:k: 12 + 8k = the traffic of an update with k
//                            state arrays, one add per array: the memory-bound
//                            floor for RMSprop/Adagrad (k = 1) and centered
//                            RMSprop with momentum (k = 3).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/optimizer.h"
#include "core/reduce.h"

namespace tessel {
namespace {

constexpr size_t kParams = size_t{16} << 20;  // 16M

// Buffers for all benchmarks, allocated and touched once.
struct Buffers {
  // exp_avg, exp_avg_sq and slot3 double as the state of the other kinds.
  std::vector<float> params, grad, grad2, mean, exp_avg, exp_avg_sq, slot3;
  Buffers()
      : params(kParams),
        grad(kParams),
        grad2(kParams),
        mean(kParams),
        exp_avg(kParams),
        exp_avg_sq(kParams),
        slot3(kParams) {
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

// One ApplyUpdate per iteration over StateSlots(p) state arrays, which start
// from InitState; `bytes` per parameter as listed at the top of the file.
void RunApplyUpdate(benchmark::State& state, const OptimizerParams& p, int64_t bytes) {
  Buffers& b = GetBuffers();
  float* slots[kMaxStateSlots] = {b.exp_avg.data(), b.exp_avg_sq.data(), b.slot3.data()};
  InitState(p, slots, kParams);
  int64_t step = 0;
  for (auto _ : state) {
    ApplyUpdate(p, ++step, b.params.data(), b.grad.data(), slots, kParams);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * bytes);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}

void BM_RmspropApplyUpdate(benchmark::State& state) {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kRmsprop;
  p.lr = 1e-3f;
  RunApplyUpdate(state, p, 20);
}
BENCHMARK(BM_RmspropApplyUpdate)->Unit(benchmark::kMillisecond);

void BM_RmspropCenteredMomentumApplyUpdate(benchmark::State& state) {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kRmsprop;
  p.lr = 1e-3f;
  p.momentum = 0.9f;
  p.centered = true;
  p.weight_decay = 0.01f;
  RunApplyUpdate(state, p, 36);
}
BENCHMARK(BM_RmspropCenteredMomentumApplyUpdate)->Unit(benchmark::kMillisecond);

void BM_AdagradApplyUpdate(benchmark::State& state) {
  OptimizerParams p;
  p.kind = OptimizerParams::Kind::kAdagrad;
  p.lr = 1e-2f;
  p.eps = 1e-10f;  // torch's Adagrad default
  p.lr_decay = 1e-4f;
  p.initial_accumulator_value = 0.1f;
  RunApplyUpdate(state, p, 20);
}
BENCHMARK(BM_AdagradApplyUpdate)->Unit(benchmark::kMillisecond);

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

// Reads param, grad and `slots` state arrays, writes param and the state.
void BM_BaselineStateShaped(benchmark::State& state) {
  Buffers& b = GetBuffers();
  const int slots = static_cast<int>(state.range(0));
  float* __restrict p = b.params.data();
  const float* __restrict g = b.grad.data();
  float* __restrict s1 = b.exp_avg.data();
  float* __restrict s2 = b.exp_avg_sq.data();
  float* __restrict s3 = b.slot3.data();
  for (auto _ : state) {
    if (slots == 1) {
      for (size_t i = 0; i < kParams; ++i) {
        const float gi = g[i];
        p[i] += gi;
        s1[i] += gi;
      }
    } else {
      for (size_t i = 0; i < kParams; ++i) {
        const float gi = g[i];
        p[i] += gi;
        s1[i] += gi;
        s2[i] += gi;
        s3[i] += gi;
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kParams) * (12 + 8 * slots));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kParams));
}
BENCHMARK(BM_BaselineStateShaped)->Arg(1)->Arg(3)->ArgName("slots")->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessel

BENCHMARK_MAIN();
