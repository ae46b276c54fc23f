// Gloo's C++ allreduce (Debian's libgloo-dev, TCP on "lo") for
// benchmarks/run_datapath: float32 sum over S bytes, timed as every side of
// that comparison is: gloo::barrier, then gloo::allreduce (ring), and the
// iteration's time is the maximum over ranks. Prints the median (min, max)
// over iterations with the same columns as datapath_bench.
// docs/machine.md ("Gloo") has this machine's Gloo figures and how to re-measure them.
// After each size's row rank 0 prints the CPU of every rank per timed step,
// summed ("cpu S_MiB MS"), and, on a device other than lo, each rank's
// device bytes per step ("link S_MiB RANK RX TX"): bench_probe.h.
// With --update=sgd|adam (a build with -DTESSEL_DDP_UPDATE, linked to
// libtessel_ddp_update.so: benchmarks/ddp_update.h), every rank then turns the sum
// into the mean and runs the optimizer's update over the whole vector with the
// kernels Tessel's servers run, in the same timed window: a DDP step.
// Build: bench_common.build_gloo (run_datapath and run_multihost call it).
// Usage: gloo_allreduce [--update=OPT] RANKS SIZES_MIB ITERS
//                                   (forks RANKS processes, tcp on lo)
//        gloo_allreduce RANKS SIZES_MIB ITERS RANK STORE_DIR IFACE
//                                   (one rank: run_multihost starts one per host
//                                    namespace, rendezvous in the shared STORE_DIR)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

extern "C" {
#include "benchmarks/bench_probe.h"
}
#ifdef TESSEL_DDP_UPDATE
#include "benchmarks/ddp_update.h"
#endif

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void RunRank(int rank, int n, const std::string& dir, const std::vector<int>& sizes, int iters,
             const std::string& iface, const std::string& update) {
  gloo::transport::tcp::attr attr;
  attr.iface = iface;
  const char* link = iface == "lo" ? "-" : iface.c_str();
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  gloo::rendezvous::PrefixStore prefix("bench", store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->connectFullMesh(prefix, dev);
  ctx->setTimeout(std::chrono::seconds(300));
  uint32_t tag = 1;
  if (rank == 0) {
    std::printf(
        "# gloo allreduce (ring, tcp on %s) float32 sum%s%s, %d ranks; step = barrier, then "
        "the slowest rank\n",
        iface.c_str(),
        update.empty() ? "" : ", then the mean and the update on every rank: ", update.c_str(), n);
    std::printf("%-8s %10s %10s %10s %10s %10s\n", "S_MiB", "t_med_ms", "t_min_ms", "t_max_ms",
                "algbw_GBs", "busbw_GBs");
  }
  for (int mib : sizes) {
    const size_t count = static_cast<size_t>(mib) << 18;
    std::vector<float> in(count, 1e-3f * static_cast<float>(rank + 1)), out(count, 0.f);
    std::vector<double> ts;
#ifdef TESSEL_DDP_UPDATE
    std::unique_ptr<ddp_update, void (*)(ddp_update*)> u(
        update.empty() ? nullptr : ddp_update_new(update.c_str(), count), &ddp_update_free);
#endif
    bench_sample start = {0, 0, 0};
    for (int it = 0; it < 3 + iters; ++it) {
      gloo::BarrierOptions bo(ctx);
      bo.setTag(tag++);
      gloo::barrier(bo);
      if (it == 3) start = bench_sample_now(link);
      const double t0 = Now();
      gloo::AllreduceOptions o(ctx);
      o.setInput(in.data(), count);
      o.setOutput(out.data(), count);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
      o.setTag(tag++);
      gloo::allreduce(o);
#ifdef TESSEL_DDP_UPDATE
      if (u != nullptr) ddp_update_apply(u.get(), out.data(), n);
#endif
      if (it >= 3) ts.push_back(Now() - t0);
    }
    {
      gloo::BarrierOptions bo(ctx);
      bo.setTag(tag++);
      gloo::barrier(bo);
    }
    const bench_sample end = bench_sample_now(link);
    // Every rank's (cpu, rx, tx) per step in its slot, summed: a gather.
    std::vector<double> probe(3 * n, 0.0), probes(3 * n, 0.0);
    probe[3 * rank] = (end.cpu_s - start.cpu_s) / iters;
    probe[3 * rank + 1] = start.rx < 0 ? -1 : (end.rx - start.rx) / iters;
    probe[3 * rank + 2] = start.tx < 0 ? -1 : (end.tx - start.tx) / iters;
    {
      gloo::AllreduceOptions o(ctx);
      o.setInput(probe.data(), probe.size());
      o.setOutput(probes.data(), probes.size());
      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<double>));
      o.setTag(tag++);
      gloo::allreduce(o);
    }
    std::vector<double> mx(ts);
    gloo::AllreduceOptions o(ctx);
    o.setInput(ts.data(), ts.size());
    o.setOutput(mx.data(), mx.size());
    o.setReduceFunction(static_cast<ReduceFn>(&gloo::max<double>));
    o.setTag(tag++);
    gloo::allreduce(o);
    if (rank == 0) {
      std::sort(mx.begin(), mx.end());
      const double med = mx[mx.size() / 2];
      const double algbw = static_cast<double>(count) * 4 / med / 1e9;
      std::printf("%-8d %10.2f %10.2f %10.2f %10.3f %10.3f\n", mib, med * 1e3, mx.front() * 1e3,
                  mx.back() * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
      double cpu = 0;
      for (int r = 0; r < n; ++r) cpu += probes[3 * r];
      std::printf("cpu %d %.3f\n", mib, cpu * 1e3);
      // p90 of the steps, nearest rank (bench_common.py's P90).
      std::printf("p90 %d %.3f\n", mib, mx[(9 * mx.size() + 9) / 10 - 1] * 1e3);
      for (int r = 0; r < n && probes[1] >= 0; ++r) {
        std::printf("link %d %d %.0f %.0f\n", mib, r, probes[3 * r + 1], probes[3 * r + 2]);
      }
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: gloo_allreduce [--update=sgd|adam] RANKS SIZES_MIB ITERS [RANK STORE_DIR IFACE]\n";
  std::string update;
  if (argc > 1 && std::string(argv[1]).rfind("--update=", 0) == 0) {
    update = std::string(argv[1]).substr(9);
#ifdef TESSEL_DDP_UPDATE
    ddp_update* probe = ddp_update_new(update.c_str(), 1);
    const bool known = probe != nullptr;
    ddp_update_free(probe);
#else
    const bool known = false;  // built without libtessel_ddp_update.so
#endif
    if (!known) {
      std::fprintf(stderr,
                   "--update=%s: not an optimizer of this build (sgd, adam with "
                   "-DTESSEL_DDP_UPDATE)\n%s",
                   update.c_str(), usage);
      return 2;
    }
    --argc;
    ++argv;
  }
  if (argc != 4 && argc != 7) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  const int n = std::atoi(argv[1]);
  std::vector<int> sizes;
  std::stringstream list(argv[2]);
  for (std::string s; std::getline(list, s, ',');) sizes.push_back(std::atoi(s.c_str()));
  const int iters = std::atoi(argv[3]);
  if (n < 1 || iters < 1 || sizes.empty()) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  if (argc == 7) {  // one rank of a multi-host run
    const int rank = std::atoi(argv[4]);
    if (rank < 0 || rank >= n) {
      std::fprintf(stderr, "RANK %d is not in [0, %d)\n%s", rank, n, usage);
      return 2;
    }
    RunRank(rank, n, argv[5], sizes, iters, argv[6], update);
    return 0;
  }
  char tmpl[] = "/tmp/gloo_allreduce_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t p = fork();
    if (p == 0) {
      RunRank(r, n, dir, sizes, iters, "lo", update);
      _exit(0);
    }
    kids.push_back(p);
  }
  int rc = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  const std::string cmd = "rm -rf " + dir;
  if (std::system(cmd.c_str()) != 0) rc = rc == 0 ? 0 : rc;
  return rc;
}
