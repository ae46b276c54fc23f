// The cost of Tessel's metrics (runtime/metrics.h) per operation, for the
// overhead figure in benchmarks/metrics_overhead.py: an update through a
// held pointer (the data path's frame counters, the worker's phases), one
// through a family lookup (a bucket update, labelled by job), and one scrape
// of a shard server's worth of series.
//
//   bazel run -c opt //benchmarks:metrics_bench -- --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <string>

#include "runtime/metrics.h"

namespace {

using tessel::metrics::ExponentialBuckets;
using tessel::metrics::Registry;

void BM_CounterAdd(benchmark::State& state) {
  Registry r;
  auto* c = r.AddCounter("b_total", "b", {"shard", "type"}).GetCounter({"0", "push"});
  for (auto _ : state) c->Add(1024);
  benchmark::DoNotOptimize(c->value());
}
BENCHMARK(BM_CounterAdd);

void BM_HistogramObserve(benchmark::State& state) {
  Registry r;
  auto* h =
      r.AddHistogram("b_seconds", "b", {"job", "rank", "phase"}, ExponentialBuckets(10e-6, 2, 22))
          .GetHistogram({"mlp", "0", "wait"});
  double v = 1e-3;
  for (auto _ : state) {
    h->Observe(v);
    v += 1e-9;
  }
  benchmark::DoNotOptimize(h->count());
}
BENCHMARK(BM_HistogramObserve);

void BM_LookupAndObserve(benchmark::State& state) {
  Registry r;
  auto& f =
      r.AddHistogram("b_update_seconds", "b", {"job", "shard"}, ExponentialBuckets(10e-6, 2, 20));
  const std::string job = "mlp";
  for (auto _ : state) f.GetHistogram({job, "0"})->Observe(2e-4);
}
BENCHMARK(BM_LookupAndObserve);

void BM_ExposeServerSized(benchmark::State& state) {
  // ~ what one shard server with `jobs` jobs exports.
  Registry r;
  auto& hist =
      r.AddHistogram("b_update_seconds", "b", {"job", "shard"}, ExponentialBuckets(10e-6, 2, 20));
  auto& counters = r.AddCounter("b_bytes_total", "b", {"job", "shard"});
  auto& gauges = r.AddGauge("b_step", "b", {"job", "shard"});
  for (int j = 0; j < state.range(0); ++j) {
    const std::string job = "job" + std::to_string(j);
    hist.GetHistogram({job, "0"})->Observe(1e-4);
    for (int k = 0; k < 8; ++k) counters.GetCounter({job + "-" + std::to_string(k), "0"})->Add(1);
    for (int k = 0; k < 4; ++k) gauges.GetGauge({job + "-" + std::to_string(k), "0"})->Set(1);
  }
  size_t bytes = 0;
  for (auto _ : state) bytes = r.Expose().size();
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ExposeServerSized)->Arg(1)->Arg(16);

}  // namespace

BENCHMARK_MAIN();
