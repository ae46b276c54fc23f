// tessel-demo: the README's first command. Starts a real local cluster
// (embedded registry, shard servers and workers as separate processes on
// loopback), trains the MLP, and checks the result against the same training
// run in this one process.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/npy.h"
#include "rpc/job_spec.h"
#include "rpc/metrics_server.h"
#include "rpc/tls_flags.h"
#include "runtime/cli.h"
#include "runtime/log.h"
#include "testing/cluster_flags.h"
#include "testing/local_cluster.h"
#include "tools/internal/hybrid_mlp.h"
#include "tools/internal/mlp_job.h"
#include "worker/train_flags.h"

ABSL_FLAG(int, servers, 2, "shard server processes");
ABSL_FLAG(int, workers, 2, "worker processes");
ABSL_FLAG(int, timeout_s, 600, "give up (and stop everything) after this many seconds");
ABSL_FLAG(double, tolerance, 1e-6, "largest acceptable relative difference vs single process");
ABSL_FLAG(double, cuda_tolerance, 3,
          "with --device=cuda (not bitwise: cuBLAS sums in its own order): the run's distance "
          "from the reference, |final - reference| / |reference| over all parameters, may be at "
          "most this many times the reference's own distance when its initial parameters move "
          "1 ulp (and at least 1e-4); see docs/gpu.md");
ABSL_FLAG(bool, skip_reference, false, "do not run the single-process comparison");
ABSL_FLAG(int, log_every, 0, "print progress every N steps (0 = ten times per run)");
ABSL_FLAG(bool, verbose, false, "show the embedded registry's log lines");
ABSL_FLAG(std::string, timeline_dir, "",
          "write every server's and worker's --timeline of steps 1-20 here (server-S.json, "
          "worker-R.json); merge them with tools/tessel-timeline (not for fsdp or hybrid)");

namespace {
volatile int g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const absl::Status& s) {
  std::cerr << "\ntessel-demo: FAILED: " << s.message() << "\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Tessel demo: a real local cluster trains an MLP classifier with the worker SDK\n"
      "and compares the result with single-process training.\n\n"
      "Usage: tessel-demo [--servers=2] [--workers=2] [--strategy=zero2|zero1|ddp|fsdp|hybrid]\n"
      "                   [--dp=2 --tp=2 --pp=2 --micro_batches=4]  (hybrid)\n"
      "                   [--optimizer=adam|adamw|sgd|rmsprop|adagrad --lr=1e-3 ...] "
      "[--steps=1500]\n"
      "                   [--layers=64,512,512,10 --batch=64] [--ucx_tls=...]\n\n"
      "Ctrl-C stops every process the demo started.");
  tessel::SetDefaultLogLevel(tessel::LogLevel::kWarning);
  tessel::ParseFlags(argc, argv);
  tessel::SetLogLabel("demo");
  if (absl::GetFlag(FLAGS_strategy) == "hybrid") {
    // Hybrid DPxTPxPP has its own launcher; hand over with the same flags.
    std::vector<std::string> args = {tessel::FindBinary("tools/tessel-hybrid-train"), "--local"};
    for (const std::string& a : tessel::ForwardedTrainFlags()) args.push_back(a);
    for (const std::string& a : tessel::ForwardedMlpFlags()) args.push_back(a);
    args.push_back("--strategy=zero2");  // each partition's job; the last value wins
    args.push_back(absl::StrCat("--dp=", absl::GetFlag(FLAGS_dp)));
    args.push_back(absl::StrCat("--tp=", absl::GetFlag(FLAGS_tp)));
    args.push_back(absl::StrCat("--pp=", absl::GetFlag(FLAGS_pp)));
    args.push_back(absl::StrCat("--servers=", absl::GetFlag(FLAGS_servers)));
    for (const std::string& a : tessel::TlsFlags(tessel::TlsOptionsFromFlags())) {
      args.push_back(a);
    }
    std::vector<char*> argv_exec;
    for (std::string& a : args) argv_exec.push_back(a.data());
    argv_exec.push_back(nullptr);
    execv(argv_exec[0], argv_exec.data());
    return Fail(absl::NotFoundError(absl::StrCat("cannot run ", args[0])));
  }
  if (absl::GetFlag(FLAGS_verbose)) tessel::SetMinLogLevel(tessel::LogLevel::kInfo);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  auto optimizer = tessel::OptimizerFromFlags();
  if (!optimizer.ok()) return Fail(optimizer.status());
  auto strategy = tessel::StrategyFromFlags();
  if (!strategy.ok()) return Fail(strategy.status());
  auto config = tessel::MlpJobFromFlags();
  if (!config.ok()) return Fail(config.status());
  auto precision = tessel::PrecisionFromFlags();
  if (!precision.ok()) return Fail(precision.status());
  const int servers = absl::GetFlag(FLAGS_servers);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (servers < 1 || servers > 64) return Fail(absl::InvalidArgumentError("--servers: 1..64"));
  if (workers < 1 || workers > 64) return Fail(absl::InvalidArgumentError("--workers: 1..64"));
  if (steps < 1) return Fail(absl::InvalidArgumentError("--steps must be >= 1"));
  tessel::MlpJob job(*config);

  tessel::ClusterOptions copt;
  copt.servers = servers;
  copt.run_dir = tessel::MakeRunDir("tessel-demo");
  if (!absl::GetFlag(FLAGS_ucx_tls).empty()) copt.ucx_tls = absl::GetFlag(FLAGS_ucx_tls);
  copt.server_args.push_back(
      absl::StrCat("--ucx_zero_copy=", absl::GetFlag(FLAGS_ucx_zero_copy) ? "true" : "false"));
  copt.tls = tessel::TlsOptionsFromFlags();
  // --metrics_address: this process (the embedded registry) serves there;
  // every server and worker on a free port of the same host (logged in
  // their logs under the run folder).
  const std::string metrics_address = absl::GetFlag(FLAGS_metrics_address);
  std::string others_metrics;
  std::unique_ptr<tessel::MetricsServer> metrics_http;
  if (!metrics_address.empty()) {
    auto access = tessel::HttpAccessFromFlags();
    if (!access.ok()) return Fail(access.status());
    auto http = tessel::MetricsServer::Start(metrics_address, &tessel::metrics::Default(), {},
                                             *std::move(access));
    if (!http.ok()) return Fail(http.status());
    metrics_http = *std::move(http);
    others_metrics = absl::StrCat(
        "--metrics_address=", metrics_address.substr(0, metrics_address.rfind(':')), ":0");
    copt.server_args.push_back(others_metrics);
    for (std::string& f : tessel::MetricsAccessFlags()) copt.server_args.push_back(std::move(f));
  }
  const std::string timeline_dir = absl::GetFlag(FLAGS_timeline_dir);
  if (!timeline_dir.empty()) {
    copt.server_args.push_back("--timeline=" + timeline_dir + "/server-{shard}.json");
    copt.server_args.push_back("--timeline_steps=20");
  }
  copt.insecure = tessel::InsecureClusterFromFlags();
  tessel::LocalCluster cluster(copt);
  std::printf(
      "Tessel demo: %d shard servers + %d workers (separate processes), strategy %s, "
      "optimizer %s lr=%g, precision %s\n",
      servers, workers, std::string(tessel::StrategyName(*strategy)).c_str(),
      tessel::OptimizerKindName(optimizer->kind), optimizer->lr,
      absl::GetFlag(FLAGS_precision).c_str());
  std::printf("model: MLP %s, %zu parameters; %d steps x %d workers x %d samples; logs in %s\n",
              absl::GetFlag(FLAGS_layers).c_str(), job.model().num_params(), steps, workers,
              config->batch, copt.run_dir.c_str());
  std::fflush(stdout);

  const absl::Time t0 = absl::Now();
  absl::Status s = cluster.Start();
  if (!s.ok()) return Fail(s);
  std::printf("registry (embedded) at %s; %d shard servers registered\n",
              cluster.registry_address().c_str(), servers);
  if (metrics_http != nullptr) {
    std::printf(
        "metrics: the registry's at http://%s/metrics; servers' and workers' on free "
        "ports (their logs say which)\n",
        metrics_http->address().c_str());
  }
  std::fflush(stdout);
  const std::string final_path = copt.run_dir + "/final.npy";
  std::vector<std::string> args = tessel::ForwardedTrainFlags();
  for (const std::string& a : tessel::ForwardedMlpFlags()) args.push_back(a);
  args.push_back("--job=demo");
  if (!others_metrics.empty()) args.push_back(others_metrics);
  if (!timeline_dir.empty()) {
    args.push_back("--timeline=" + timeline_dir + "/worker-{rank}.json");
    args.push_back("--timeline_steps=20");
  }
  args.push_back("--out=" + final_path);
  const int log_every = absl::GetFlag(FLAGS_log_every);
  args.push_back(absl::StrCat("--log_every=", log_every > 0 ? log_every : std::max(1, steps / 10)));
  s = cluster.RunWorkers(workers, args, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)), &g_stop);
  if (!s.ok()) {
    cluster.Stop();
    return Fail(s);
  }
  const double train_secs = absl::ToDoubleSeconds(absl::Now() - t0);
  cluster.Stop();
  std::printf("cluster run finished in %.1f s (including start-up); every process stopped\n",
              train_secs);

  auto final_params = tessel::ReadNpyF32(final_path);
  if (!final_params.ok()) return Fail(final_params.status());
  std::printf("final accuracy: train %.2f%%, test %.2f%%\n",
              100.0 * job.TrainAccuracy(final_params->data()),
              100.0 * job.TestAccuracy(final_params->data()));
  if (absl::GetFlag(FLAGS_skip_reference)) return 0;
  const double topk = absl::GetFlag(FLAGS_topk_ratio);
  if (topk > 0) {
    // Compressed pushes are not single-process training: compare accuracy.
    std::printf("running the same training in one process (uncompressed) for comparison...\n");
    std::fflush(stdout);
    std::vector<float> reference = tessel::TrainReference(
        job, *optimizer, workers, steps, *precision, absl::GetFlag(FLAGS_micro_batches),
        /*half_mean=*/*strategy == tessel::Strategy::kDdp, 0);
    std::printf(
        "top-k compression (ratio %g) is not bitwise equal to single-process training; "
        "uncompressed single process: train %.2f%%, test %.2f%%\n",
        topk, 100.0 * job.TrainAccuracy(reference.data()),
        100.0 * job.TestAccuracy(reference.data()));
    return 0;
  }
  std::printf("running the same training in one process for comparison...\n");
  std::fflush(stdout);
  auto train_reference = [&](int init_ulps) {
    return tessel::TrainReference(job, *optimizer, workers, steps, *precision,
                                  absl::GetFlag(FLAGS_micro_batches),
                                  /*half_mean=*/*strategy == tessel::Strategy::kDdp, init_ulps);
  };
  std::vector<float> reference = train_reference(/*init_ulps=*/0);
  const double diff = tessel::MaxRelativeDifference(*final_params, reference);
  if (config->device == "cuda") {
    // Not bitwise (cuBLAS's summation order), so the question is whether the
    // run is as close to the reference as rounding can keep any run: the
    // reference trained again from initial parameters 1 ulp away measures
    // how far rounding-sized differences carry this job (Adam amplifies
    // them over many steps while the loss stays the same).
    const std::vector<float> moved = train_reference(/*init_ulps=*/1);
    const double norm_diff = tessel::NormRelativeDifference(*final_params, reference);
    const double rounding = tessel::NormRelativeDifference(moved, reference);
    const double limit = std::max(1e-4, absl::GetFlag(FLAGS_cuda_tolerance) * rounding);
    std::printf("single-process reference (CPU): train %.2f%%, test %.2f%%\n",
                100.0 * job.TrainAccuracy(reference.data()),
                100.0 * job.TestAccuracy(reference.data()));
    std::printf(
        "relative difference vs single process: %.3g in norm (%.3g at worst element); "
        "the reference moves %.3g when its initial parameters move 1 ulp (limit %.3g)\n",
        norm_diff, diff, rounding, limit);
    if (!(norm_diff <= limit)) {
      return Fail(absl::InternalError("the GPU run differs from single-process training"));
    }
    std::printf("OK\n");
    return 0;
  }
  std::printf("max relative difference vs single process: %.3g (tolerance %g)\n", diff,
              absl::GetFlag(FLAGS_tolerance));
  if (!(diff <= absl::GetFlag(FLAGS_tolerance))) {
    return Fail(absl::InternalError("distributed result differs from single-process training"));
  }
  std::printf("OK\n");
  return 0;
}
