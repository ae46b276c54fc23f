// The servers' update kernels against this machine's memory bandwidth:
// for each size (MiB of fp32 parameters) and thread count (1 and N), a
// STREAM-style copy and triad of the same size, then every kernel a shard
// server runs on a bucket (server/update_rule.cc: ReduceAndApply, the
// rank-order mean of W pushes fused with the optimizer; ReduceMean for DDP)
// and the bare ApplyUpdate, in GB/s and as a ratio to the triad measured in
// the same repeat. N threads split the range with the servers' own
// UpdatePool (server/update_pool.h), chunks of at least n / (4 N).
//
// Bytes per parameter, each array read and each array written counted once
// (4 bytes a float; write-allocate reads not counted, as STREAM does):
//   copy        8   a = b
//   triad      12   a = b + s * c
//   apply      4 (grad) + 8 (param r/w) + 8 per state array (r/w)
//   reduce+apply w=W: 4 W (the pushes) + 8 (param) + 8 per state array
//   ... out    the same out of place (param read from one array, written
//              to another: the shard's two served versions)
//   ddp mean w=W:     4 W + 4 (the mean written)
// State arrays: SGD 0, SGD momentum 1, Adam and AdamW 2.
//
// Each repeat runs every kernel once (interleaved, so the machine's noise
// hits them alike), each for --min_ms at least; printed: the median over
// --repeats of GB/s, and the median, min and max over repeats of the ratio
// kernel GB/s / triad GB/s (>= 0.67: within 1.5x of the triad's time for the
// same bytes). The machine's load (load average, CPU busy and steal while it
// ran) is printed before and after.
//
//   bazel run //benchmarks:update_bw_bench -- --sizes_mib=1,16,64 --repeats=7
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "server/update_pool.h"

ABSL_FLAG(std::string, sizes_mib, "1,16,64", "sizes, MiB of fp32 parameters");
ABSL_FLAG(int, threads, 0, "the multi-thread count (0: hardware concurrency)");
ABSL_FLAG(int, repeats, 7, "repeats; medians over them");
ABSL_FLAG(double, min_ms, 30, "each kernel runs at least this long per repeat");

namespace tessel {
namespace {

constexpr int kMaxW = 4;

// The triad and copy, vectorised the way the kernels are (-O3, AVX2 clone).
__attribute__((target_clones("avx2", "default"))) void Triad(float* __restrict a,
                                                             const float* __restrict b,
                                                             const float* __restrict c, float s,
                                                             size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

struct Arrays {
  std::vector<float> params, s0, s1, out;
  std::vector<std::vector<float>> grads;
  explicit Arrays(size_t n) : params(n), s0(n), s1(n), out(n), grads(kMaxW, std::vector<float>(n)) {
    for (size_t i = 0; i < n; ++i) {
      params[i] = static_cast<float>((i * 7919) % 2001) / 1000.f - 1.f;
      for (int r = 0; r < kMaxW; ++r) {
        grads[r][i] = (static_cast<float>((i * 104729 + r * 31) % 2001) / 1000.f - 1.f) * 1e-2f;
      }
    }
  }
};

struct Kernel {
  std::string name;
  double bytes_per_param;
  // Runs once over [b, e).
  std::function<void(size_t b, size_t e)> run;
};

OptimizerParams Optimizer(const std::string& name) {
  OptimizerParams p;
  if (name == "sgd") {
    p.kind = OptimizerParams::Kind::kSgd;
    p.lr = 1e-3f;
  } else if (name == "sgd-momentum") {
    p.kind = OptimizerParams::Kind::kSgd;
    p.lr = 1e-3f;
    p.momentum = 0.9f;
  } else if (name == "adam") {
    p.kind = OptimizerParams::Kind::kAdam;
    p.lr = 1e-4f;
  } else {
    p.kind = OptimizerParams::Kind::kAdamW;
    p.lr = 1e-4f;
    p.weight_decay = 0.01f;
  }
  return p;
}

std::vector<Kernel> Kernels(Arrays& a, int64_t* step) {
  std::vector<Kernel> k;
  k.push_back({"copy", 8, [&a](size_t b, size_t e) {
                 std::memcpy(a.out.data() + b, a.params.data() + b, (e - b) * sizeof(float));
               }});
  k.push_back({"triad", 12, [&a](size_t b, size_t e) {
                 Triad(a.out.data() + b, a.params.data() + b, a.grads[0].data() + b, 0.5f, e - b);
               }});
  for (const std::string opt : {"sgd", "sgd-momentum", "adam", "adamw"}) {
    const OptimizerParams p = Optimizer(opt);
    const int slots = StateSlots(p);
    k.push_back({opt + " apply", 12.0 + 8 * slots, [&a, p, step](size_t b, size_t e) {
                   float* st[kMaxStateSlots] = {a.s0.data() + b, a.s1.data() + b};
                   ApplyUpdate(p, *step, a.params.data() + b, a.grads[0].data() + b, st, e - b);
                 }});
    for (int w : {2, 4}) {
      k.push_back({opt + " reduce+apply w=" + std::to_string(w), 4.0 * w + 8 + 8 * slots,
                   [&a, p, step, w](size_t b, size_t e) {
                     float* st[kMaxStateSlots] = {a.s0.data() + b, a.s1.data() + b};
                     const float* srcs[kMaxW];
                     for (int r = 0; r < w; ++r) srcs[r] = a.grads[r].data() + b;
                     ReduceAndApply(p, *step, a.params.data() + b, srcs, w, st, e - b, w);
                   }});
    }
    // Out of place (a shard's two served versions): params read, out
    // written; the same bytes counted as in place.
    k.push_back({opt + " apply out", 12.0 + 8 * slots, [&a, p, step](size_t b, size_t e) {
                   float* st[kMaxStateSlots] = {a.s0.data() + b, a.s1.data() + b};
                   OptimizerUpdate(p, *step).Run(a.params.data() + b, a.out.data() + b,
                                                 a.grads[0].data() + b, st, 0, e - b);
                 }});
    for (int w : {2, 4}) {
      k.push_back({opt + " reduce+apply out w=" + std::to_string(w), 4.0 * w + 8 + 8 * slots,
                   [&a, p, step, w](size_t b, size_t e) {
                     float* st[kMaxStateSlots] = {a.s0.data() + b, a.s1.data() + b};
                     const float* srcs[kMaxW];
                     for (int r = 0; r < w; ++r) srcs[r] = a.grads[r].data() + b;
                     ReduceAndApply(p, *step, a.params.data() + b, a.out.data() + b, srcs, w, st,
                                    e - b, w);
                   }});
    }
  }
  for (int w : {2, 4}) {
    k.push_back({"ddp mean w=" + std::to_string(w), 4.0 * w + 4, [&a, w](size_t b, size_t e) {
                   const float* srcs[kMaxW];
                   for (int r = 0; r < w; ++r) srcs[r] = a.grads[r].data() + b;
                   ReduceMean(srcs, w, a.out.data() + b, e - b, w);
                 }});
  }
  return k;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// CPU time counters of the whole machine (/proc/stat's first line).
struct CpuTimes {
  uint64_t busy = 0, idle = 0, steal = 0;
};
CpuTimes ReadCpu() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  f >> cpu;
  for (uint64_t& x : v) f >> x;
  CpuTimes t;
  t.idle = v[3] + v[4];
  t.steal = v[7];
  t.busy = v[0] + v[1] + v[2] + v[5] + v[6];
  return t;
}
std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Seconds one run of `k` over [0, n) takes on `threads` threads.
double TimeOnce(const Kernel& k, size_t n, UpdatePool* pool) {
  const auto start = std::chrono::steady_clock::now();
  if (pool == nullptr) {
    k.run(0, n);
  } else {
    const size_t min_chunk = std::max<size_t>(
        1, n / (static_cast<size_t>(pool->threads()) * UpdatePool::kChunksPerThread));
    pool->ParallelFor(n, min_chunk, [&](size_t b, size_t e) { k.run(b, e); });
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void RunSize(double mib, UpdatePool* pool, int repeats, double min_s) {
  const size_t n = static_cast<size_t>(mib * (1 << 20) / sizeof(float));
  Arrays a(n);
  int64_t step = 1;
  std::vector<Kernel> kernels = Kernels(a, &step);
  const int threads = pool == nullptr ? 1 : pool->threads();
  // Warm-up and calibration: iterations per repeat for min_s.
  std::vector<int> iters;
  for (const Kernel& k : kernels) {
    TimeOnce(k, n, pool);
    const double once = TimeOnce(k, n, pool);
    iters.push_back(std::max(1, static_cast<int>(min_s / std::max(once, 1e-7))));
  }
  ++step;
  std::vector<std::vector<double>> gbps(kernels.size());
  std::vector<std::vector<double>> ratio(kernels.size());
  const size_t triad = 1;
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < kernels.size(); ++i) {
      double total = 0;
      for (int it = 0; it < iters[i]; ++it) {
        total += TimeOnce(kernels[i], n, pool);
        ++step;
      }
      gbps[i].push_back(kernels[i].bytes_per_param * static_cast<double>(n) * iters[i] / total /
                        1e9);
    }
    for (size_t i = 0; i < kernels.size(); ++i) ratio[i].push_back(gbps[i].back() / gbps[triad][r]);
  }
  std::printf("\n%g MiB (%zu parameters), %d thread(s)\n", mib, n, threads);
  std::printf("  %-32s %7s %10s %8s %22s\n", "kernel", "B/param", "median ms", "GB/s",
              "ratio to triad [min-max]");
  for (size_t i = 0; i < kernels.size(); ++i) {
    const double g = Median(gbps[i]);
    const double ms = kernels[i].bytes_per_param * static_cast<double>(n) / g / 1e6;
    const auto [lo, hi] = std::minmax_element(ratio[i].begin(), ratio[i].end());
    std::printf("  %-32s %7.0f %10.3f %8.2f %8.2f [%.2f-%.2f]%s\n", kernels[i].name.c_str(),
                kernels[i].bytes_per_param, ms, g, Median(ratio[i]), *lo, *hi,
                Median(ratio[i]) < 1 / 1.5 ? "  < 1/1.5" : "");
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<double> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    double v = 0;
    if (!absl::SimpleAtod(s, &v) || v <= 0) {
      std::fprintf(stderr, "--sizes_mib: '%.*s' is not a positive number\n",
                   static_cast<int>(s.size()), s.data());
      return 2;
    }
    sizes.push_back(v);
  }
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  const double min_s = absl::GetFlag(FLAGS_min_ms) / 1e3;
  std::printf("update_bw_bench: sizes %s MiB, 1 and %d thread(s), %d repeats, >= %g ms each\n",
              absl::GetFlag(FLAGS_sizes_mib).c_str(), threads, repeats, min_s * 1e3);
  std::printf("load average before: %s\n", tessel::LoadAvg().c_str());
  const tessel::CpuTimes before = tessel::ReadCpu();
  const auto started = std::chrono::steady_clock::now();
  tessel::UpdatePool pool(threads);
  for (double mib : sizes) {
    tessel::RunSize(mib, nullptr, repeats, min_s);
    if (threads > 1) tessel::RunSize(mib, &pool, repeats, min_s);
  }
  const tessel::CpuTimes after = tessel::ReadCpu();
  const double busy = static_cast<double>(after.busy - before.busy);
  const double all = busy + static_cast<double>(after.idle - before.idle) +
                     static_cast<double>(after.steal - before.steal);
  std::printf(
      "\nload average after: %s; over the run (%.1f s): machine CPU busy %.0f%%, steal %.1f%%"
      " (this benchmark: 1 or %d busy threads of %u)\n",
      tessel::LoadAvg().c_str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
      all > 0 ? 100 * busy / all : 0,
      all > 0 ? 100 * static_cast<double>(after.steal - before.steal) / all : 0, threads,
      std::thread::hardware_concurrency());
  return 0;
}
