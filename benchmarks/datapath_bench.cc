// Data-path benchmark: W worker processes each push S bytes of gradients and
// pull S bytes of parameters through N shard server processes, per step, over
// the real stack (worker SDK, UCX, shard servers reducing in rank order and
// applying plain SGD). A step is timed as the collectives baselines time
// theirs: every rank passes a barrier (a job-wide AllReduceMean of one float,
// not timed), then times its Step(); the step's time is the maximum over the
// ranks. Prints, per size, the median (and min, max) of those step times over
// the iterations and the bandwidth in GB/s (1e9 B/s) by the nccl-tests
// convention for an allreduce of S bytes over W ranks: algbw = S / t,
// busbw = algbw * 2 (W - 1) / W.
//
// Also per size: the CPU every process of the job (workers and shard servers)
// spent per timed step ("cpu S_MiB MS"), and with --link_dev each worker's
// device bytes per step ("link S_MiB RANK RX TX"; bench_probe.h).
//
// Usage: datapath_bench [--workers=2] [--servers=2] [--sizes_mib=1,16,64]
//                       [--iters=10] [--ucx_tls=posix,sysv,self]
// benchmarks/run_datapath.sh runs it beside Open MPI's MPI_Allreduce; the
// roles worker and report let benchmarks/run_multihost.py start the workers
// itself (one host namespace each) against servers it started, then print
// the same table.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

extern "C" {
#include "benchmarks/bench_probe.h"
}
#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "rpc/grpc_util.h"
#include "runtime/cli.h"
#include "runtime/log.h"
#include "testing/local_cluster.h"
#include "transport/ucx/ucx_flags.h"
#include "worker/train_flags.h"
#include "worker/worker.h"
#include "worker/worker_flags.h"

ABSL_FLAG(int, workers, 2, "worker processes");
ABSL_FLAG(int, servers, 2, "shard server processes");
ABSL_FLAG(std::string, sizes_mib, "1,16,64", "gradient sizes S in MiB (comma-separated)");
ABSL_FLAG(int, iters, 10, "timed steps per size (after 3 warm-up steps)");
ABSL_FLAG(bool, overlap, false,
          "hand every gradient over (GradientsReady) at the step's start, as backward's hooks do "
          "with overlap, so the pushes go before Step()");
ABSL_FLAG(double, clip_max_norm, 0,
          "> 0: clip by the job-wide norm on held steps (implies --overlap): HoldUpdates, then "
          "per step HeldGradientNorm and ReleaseStep with torch's factor, timed with the step");
ABSL_FLAG(int64_t, update_spin_us, -1, "the shard servers' --update_spin_us (-1: their default)");
ABSL_FLAG(bool, fold_prefix, true,
          "the shard servers' --fold_prefix (false: reduce a bucket only once every rank's push "
          "is in; matters with three or more workers)");
ABSL_FLAG(int64_t, inline_update_max_bytes, -1,
          "the shard servers' --inline_update_max_bytes (-1: their default; 0: every bucket "
          "through the update threads)");
ABSL_FLAG(int, update_threads, 0,
          "the shard servers' --update_threads (0: their default, half the cores)");
ABSL_FLAG(std::string, server_args, "",
          "more flags for every shard server, space-separated (e.g. "
          "\"--receive_check_ms=100 --receive_check_timeout_ms=20\": probe the receive queues "
          "often and impatiently, as //benchmarks:saturation_test does)");
ABSL_FLAG(std::string, step_times, "",
          "worker: append each timed step to this file, one line per step: rank, S_MiB, step "
          "index, its start (unix us), its time and its push/wait/pull phases (ms); pass it "
          "with --worker_args to see when slow steps come (bursts, periods)");
ABSL_FLAG(std::string, worker_args, "",
          "more flags for every worker, space-separated (e.g. \"--rejoin_in_place=false\": "
          "the job's shards keep one served version and update in place)");
// Internal: worker mode.
ABSL_FLAG(std::string, role, "launcher",
          "launcher (start a local cluster and the workers, print the table), worker (one rank "
          "against --registry) or report (print the table from --result files)");
ABSL_FLAG(std::string, link_dev, "",
          "worker: also count this network device's bytes over the timed steps (e.g. eth0 in a "
          "network namespace used as a host)");
ABSL_FLAG(int, rank, 0, "internal: worker rank");
ABSL_FLAG(std::string, result, "", "worker, report: the result files' path prefix");

namespace {

std::vector<int> Sizes() {
  std::vector<int> out;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_sizes_mib), ',')) {
    int v;
    if (absl::SimpleAtoi(s, &v) && v > 0) out.push_back(v);
  }
  return out;
}

int RunWorker() {
  const int rank = absl::GetFlag(FLAGS_rank);
  tessel::SetLogLabel(absl::StrCat("bench-worker[", rank, "]"));
  tessel::SetMinLogLevel(tessel::LogLevel::kWarning);
  std::ofstream result(absl::StrCat(absl::GetFlag(FLAGS_result), ".", rank));
  for (int mib : Sizes()) {
    auto options = tessel::WorkerOptionsFromFlags();
    if (!options.ok()) {
      std::cerr << options.status() << "\n";
      return 1;
    }
    tessel::WorkerOptions o = std::move(*options);
    o.job = absl::StrCat("bench", mib);
    o.rank = rank;
    o.world_size = absl::GetFlag(FLAGS_workers);
    o.num_servers = absl::GetFlag(FLAGS_servers);
    auto worker = tessel::Worker::Connect(o);
    if (!worker.ok()) {
      std::cerr << worker.status() << "\n";
      return 1;
    }
    const int64_t n = int64_t{mib} << 18;
    std::vector<float> init(n, 0.5f);
    absl::Status s = (*worker)->RegisterLayout({{"w", {n}}}, init);
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    std::fill((*worker)->grads().begin(), (*worker)->grads().end(), 1e-3f * (rank + 1));
    const double clip = absl::GetFlag(FLAGS_clip_max_norm);
    const bool overlap = absl::GetFlag(FLAGS_overlap) || clip > 0;
    if (clip > 0) s = (*worker)->HoldUpdates(true);
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    std::vector<double> times;
    std::vector<int64_t> starts_us;  // each timed step's start, unix us (--step_times)
    std::vector<tessel::StepPhases> phases;
    std::vector<float> token(1);
    int64_t shard_calls = 0, registry_calls = 0;
    // The busiest server's reduce + update time (ShardStats.update_us), read
    // by rank 0 outside the timed steps' RPC count.
    // And every server's process CPU (ShardStats.process_cpu_us).
    std::vector<int64_t> update_us, server_cpu_us;
    auto server_stats = [&]() -> absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> {
      TESSEL_ASSIGN_OR_RETURN(auto reports, (*worker)->ServerStats());
      std::vector<std::pair<int64_t, int64_t>> out;
      for (const tessel::ShardReport& r : reports) {
        out.emplace_back(r.update_us, r.process_cpu_us);
      }
      return out;
    };
    const std::string link = absl::GetFlag(FLAGS_link_dev);
    bench_sample probe_start{0, 0, 0};
    for (int i = 0; i < 3 + absl::GetFlag(FLAGS_iters); ++i) {
      if (i == 3 && rank == 0) {
        auto before = server_stats();
        if (!before.ok()) {
          std::cerr << before.status() << "\n";
          return 1;
        }
        for (const auto& [u, c] : *before) {
          update_us.push_back(u);
          server_cpu_us.push_back(c);
        }
      }
      if (i == 3) {  // control calls during the timed steps (barriers included)
        shard_calls = -tessel::ClientCalls(tessel::RpcService::kShard);
        registry_calls = -tessel::ClientCalls(tessel::RpcService::kRegistry);
      }
      s = (*worker)->AllReduceMean(absl::MakeSpan(token));  // the barrier
      if (i == 3) probe_start = bench_sample_now(link.c_str());
      const absl::Time t0 = absl::Now();
      if (s.ok() && overlap) s = (*worker)->GradientsReady(0, n);
      if (s.ok() && clip > 0) {
        absl::StatusOr<tessel::GradNormStats> stats = (*worker)->HeldGradientNorm();
        s = stats.status();
        if (s.ok()) {
          const double factor = clip / (tessel::NormOf(*stats, 2.0) + 1e-6);
          s = (*worker)->ReleaseStep(factor < 1 ? static_cast<float>(factor) : 0.f);
        }
      }
      if (s.ok()) s = (*worker)->Step();
      if (!s.ok()) {
        std::cerr << s << "\n";
        return 1;
      }
      if (i >= 3) {
        times.push_back(absl::ToDoubleSeconds(absl::Now() - t0));
        starts_us.push_back(absl::ToUnixMicros(t0));
        phases.push_back((*worker)->last_step_phases());
      }
    }
    // The timed steps end when every rank's has.
    s = (*worker)->AllReduceMean(absl::MakeSpan(token));
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    const bench_sample probe_end = bench_sample_now(link.c_str());
    if (rank == 0) {
      std::ofstream path(absl::StrCat(absl::GetFlag(FLAGS_result), ".path"));
      path << (*worker)->data_path() << "; " << (*worker)->aggregation() << "\n";
    }
    shard_calls += tessel::ClientCalls(tessel::RpcService::kShard);
    registry_calls += tessel::ClientCalls(tessel::RpcService::kRegistry);
    const int iters = absl::GetFlag(FLAGS_iters);
    double update_ms = 0;       // per step, the busiest server
    double servers_cpu_ms = 0;  // per step, all servers
    if (rank == 0) {
      auto after = server_stats();
      if (!after.ok() || after->size() != update_us.size()) {
        std::cerr << "server stats after the timed steps: "
                  << (after.ok() ? absl::Status() : after.status()) << "\n";
        return 1;
      }
      for (size_t k = 0; k < update_us.size(); ++k) {
        update_ms = std::max(update_ms, ((*after)[k].first - update_us[k]) * 1e-3 / iters);
        servers_cpu_ms += ((*after)[k].second - server_cpu_us[k]) * 1e-3 / iters;
      }
    }
    {
      std::ofstream probe(absl::StrCat(absl::GetFlag(FLAGS_result), ".probe.", rank),
                          std::ios::app);
      probe << mib << " " << (probe_end.cpu_s - probe_start.cpu_s) / iters << " "
            << (probe_start.rx < 0 ? -1 : (probe_end.rx - probe_start.rx) / iters) << " "
            << (probe_start.tx < 0 ? -1 : (probe_end.tx - probe_start.tx) / iters) << "\n";
    }
    if (const std::string step_times = absl::GetFlag(FLAGS_step_times); !step_times.empty()) {
      std::ofstream out(step_times, std::ios::app);
      for (size_t i = 0; i < times.size(); ++i) {
        out << rank << " " << mib << " " << i << " " << starts_us[i] << " " << times[i] * 1e3 << " "
            << phases[i].push_ns * 1e-6 << " " << phases[i].wait_ns * 1e-6 << " "
            << phases[i].pull_ns * 1e-6 << "\n";
      }
    }
    for (size_t i = 0; i < times.size(); ++i) {
      result << mib << " " << i << " " << times[i] << " " << phases[i].push_ns * 1e-9 << " "
             << phases[i].wait_ns * 1e-9 << " " << phases[i].pull_ns * 1e-9 << "\n";
    }
    result.flush();
    if (rank == 0) {
      std::ofstream calls(absl::StrCat(absl::GetFlag(FLAGS_result), ".calls"), std::ios::app);
      calls << mib << " " << shard_calls << " " << registry_calls << " " << update_ms << " "
            << servers_cpu_ms << "\n";
    }
  }
  return 0;
}

// Prints the table from the result files the workers (and rank 0) wrote
// under `result`.
int Report(const std::string& result, int workers, int servers, const std::string& tls,
           bool zero_copy) {
  // Per (size, iteration): the slowest rank's time, and that rank's phases.
  struct Slowest {
    double t = -1, push = 0, wait = 0, pull = 0;
  };
  std::map<std::pair<int, int>, Slowest> step;
  for (int r = 0; r < workers; ++r) {
    std::ifstream in(absl::StrCat(result, ".", r));
    int mib, iter;
    double t, push, wait, pull;
    while (in >> mib >> iter >> t >> push >> wait >> pull) {
      Slowest& slot = step[{mib, iter}];
      if (t > slot.t) slot = Slowest{t, push, wait, pull};
    }
  }
  std::vector<std::pair<int, double>> rows;
  std::map<int, std::vector<Slowest>> by_size;
  for (const auto& [key, s] : step) {
    rows.emplace_back(key.first, s.t);
    by_size[key.first].push_back(s);
  }
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::map<int, std::pair<int64_t, int64_t>> calls;  // rank 0's, per size
  std::map<int, double> update_ms;  // the busiest server's reduce + update per step
  std::map<int, double> cpu_ms;     // every process's CPU per step: servers, then workers
  {
    std::ifstream in(result + ".calls");
    int mib;
    int64_t shard, registry;
    double update, servers_cpu;
    while (in >> mib >> shard >> registry >> update >> servers_cpu) {
      calls[mib] = {shard, registry};
      update_ms[mib] = update;
      cpu_ms[mib] = servers_cpu;
    }
  }
  std::map<int, std::vector<std::pair<double, double>>> link;  // per size, per rank: rx, tx
  for (int r = 0; r < workers; ++r) {
    std::ifstream in(absl::StrCat(result, ".probe.", r));
    int mib;
    double cpu_s, rx, tx;
    while (in >> mib >> cpu_s >> rx >> tx) {
      cpu_ms[mib] += cpu_s * 1e3;
      if (rx >= 0) link[mib].emplace_back(rx, tx);
    }
  }
  std::string path;
  {
    std::ifstream in(result + ".path");
    std::getline(in, path);
  }
  std::printf(
      "# tessel datapath: %d workers, %d servers, bucket %lld B, UCX_TLS=%s, %s; step = barrier, "
      "then the slowest rank's Step(); payloads: %s (--ucx_zero_copy=%s)\n",
      workers, servers, static_cast<long long>(absl::GetFlag(FLAGS_bucket_bytes)),
      tls.empty() ? "(default)" : tls.c_str(), absl::GetFlag(FLAGS_optimizer).c_str(), path.c_str(),
      zero_copy ? "true" : "false");
  std::printf("%-8s %10s %10s %10s %10s %10s   %s   %s\n", "S_MiB", "t_med_ms", "t_min_ms",
              "t_max_ms", "algbw_GBs", "busbw_GBs",
              "rank 0's control RPCs in the timed steps: shard, registry",
              "the slowest rank's phases, median ms (Worker::last_step_phases), and the "
              "busiest server's reduce + update per step (ShardStats.update_us)");
  for (int size : Sizes()) {
    std::vector<double> ts;
    for (auto& [m, v] : rows) {
      if (m == size) ts.push_back(v);
    }
    if (ts.empty()) continue;
    std::sort(ts.begin(), ts.end());
    const double med = ts[ts.size() / 2];
    const double bytes = static_cast<double>(int64_t{size} << 20);
    const double algbw = bytes / med / 1e9;
    const double busbw = algbw * 2.0 * (workers - 1) / workers;
    std::vector<double> push, wait, pull;
    for (const Slowest& s : by_size[size]) {
      push.push_back(s.push);
      wait.push_back(s.wait);
      pull.push_back(s.pull);
    }
    std::printf(
        "%-8d %10.2f %10.2f %10.2f %10.3f %10.3f   %lld %lld   push %.2f wait %.2f pull %.2f "
        "update %.2f\n",
        size, med * 1e3, ts.front() * 1e3, ts.back() * 1e3, algbw, busbw,
        static_cast<long long>(calls[size].first), static_cast<long long>(calls[size].second),
        median_of(push) * 1e3, median_of(wait) * 1e3, median_of(pull) * 1e3, update_ms[size]);
    std::printf("cpu %d %.3f\n", size, cpu_ms[size]);
    // p90 of the steps, nearest rank (bench_common.py's P90).
    std::printf("p90 %d %.3f\n", size, ts[(9 * ts.size() + 9) / 10 - 1] * 1e3);
    for (size_t r = 0; r < link[size].size(); ++r) {
      std::printf("link %d %zu %.0f %.0f\n", size, r, link[size][r].first, link[size][r].second);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel data-path benchmark: W workers push and pull S bytes through N shard servers.\n"
      "Usage: datapath_bench [--workers=2] [--servers=2] [--sizes_mib=1,16,64] [--iters=10]\n"
      "       [--bucket_bytes=4194304] [--ucx_tls=...] [--strategy=zero2] [--optimizer=sgd]\n"
      "       [--poll_mode=auto|spin|event]");
  // The data path is what is measured: the cheapest update by default.
  absl::SetFlag(&FLAGS_optimizer, "sgd");
  tessel::SetDefaultLogLevel(tessel::LogLevel::kWarning);
  tessel::ParseFlags(argc, argv);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "worker") return RunWorker();
  if (role == "report") {
    if (absl::GetFlag(FLAGS_result).empty()) {
      std::cerr << "--role=report needs --result (the workers' result path prefix)\n";
      return 2;
    }
    return Report(absl::GetFlag(FLAGS_result), absl::GetFlag(FLAGS_workers),
                  absl::GetFlag(FLAGS_servers), absl::GetFlag(FLAGS_ucx_tls),
                  absl::GetFlag(FLAGS_ucx_zero_copy));
  }
  if (role != "launcher") {
    std::cerr << "--role=" << role << ": expected launcher, worker or report\n";
    return 2;
  }

  const int workers = absl::GetFlag(FLAGS_workers);
  tessel::ClusterOptions copt;
  copt.servers = absl::GetFlag(FLAGS_servers);
  copt.run_dir = tessel::MakeRunDir("tessel-bench");
  if (!absl::GetFlag(FLAGS_ucx_tls).empty()) copt.ucx_tls = absl::GetFlag(FLAGS_ucx_tls);
  if (absl::GetFlag(FLAGS_update_threads) > 0) {
    copt.server_args.push_back(
        absl::StrCat("--update_threads=", absl::GetFlag(FLAGS_update_threads)));
  }
  if (!absl::GetFlag(FLAGS_fold_prefix)) copt.server_args.push_back("--fold_prefix=false");
  if (absl::GetFlag(FLAGS_inline_update_max_bytes) >= 0) {
    copt.server_args.push_back(
        absl::StrCat("--inline_update_max_bytes=", absl::GetFlag(FLAGS_inline_update_max_bytes)));
  }
  if (absl::GetFlag(FLAGS_update_spin_us) >= 0) {
    copt.server_args.push_back(
        absl::StrCat("--update_spin_us=", absl::GetFlag(FLAGS_update_spin_us)));
  }
  const bool zero_copy = absl::GetFlag(FLAGS_ucx_zero_copy);
  const std::string poll_mode = absl::StrCat("--poll_mode=", absl::GetFlag(FLAGS_poll_mode));
  const std::string ucx_spin = absl::StrCat("--ucx_spin_us=", absl::GetFlag(FLAGS_ucx_spin_us));
  copt.server_args.push_back(poll_mode);
  copt.server_args.push_back(ucx_spin);
  copt.server_args.push_back(absl::StrCat("--ucx_zero_copy=", zero_copy ? "true" : "false"));
  for (absl::string_view arg :
       absl::StrSplit(absl::GetFlag(FLAGS_server_args), ' ', absl::SkipEmpty())) {
    copt.server_args.emplace_back(arg);
  }
  tessel::LocalCluster cluster(copt);
  absl::Status s = cluster.Start();
  if (!s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  char self[4096] = {};
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string result = copt.run_dir + "/result.txt";
  std::vector<std::string> names;
  for (int r = 0; r < workers; ++r) {
    std::vector<std::string> argv = {
        std::string(self, len > 0 ? len : 0),
        "--role=worker",
        absl::StrCat("--registry=", cluster.registry_address()),
        absl::StrCat("--rank=", r),
        absl::StrCat("--workers=", workers),
        absl::StrCat("--servers=", copt.servers),
        absl::StrCat("--sizes_mib=", absl::GetFlag(FLAGS_sizes_mib)),
        absl::StrCat("--iters=", absl::GetFlag(FLAGS_iters)),
        absl::StrCat("--bucket_bytes=", absl::GetFlag(FLAGS_bucket_bytes)),
        absl::StrCat("--ucx_tls=", copt.ucx_tls),
        absl::StrCat("--ucx_zero_copy=", zero_copy ? "true" : "false"),
        poll_mode,
        ucx_spin,
        absl::StrCat("--strategy=", absl::GetFlag(FLAGS_strategy)),
        absl::StrCat("--optimizer=", absl::GetFlag(FLAGS_optimizer)),
        absl::StrFormat("--lr=%.17g", absl::GetFlag(FLAGS_lr)),
        "--result=" + result};
    for (std::string& f : cluster.WorkerCredentialFlags()) argv.push_back(std::move(f));
    for (absl::string_view arg :
         absl::StrSplit(absl::GetFlag(FLAGS_worker_args), ' ', absl::SkipEmpty())) {
      argv.emplace_back(arg);
    }
    names.push_back(absl::StrCat("bench", r));
    s = cluster.processes().Start(names.back(), argv);
    if (!s.ok()) break;
  }
  if (s.ok()) s = cluster.processes().WaitAll(names, absl::Minutes(20));
  cluster.Stop();
  if (!s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  return Report(result, workers, copt.servers, copt.ucx_tls, zero_copy);
}
