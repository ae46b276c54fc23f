// tessel-hybrid-train: one process of a hybrid data x tensor x pipeline
// parallel MLP job (docs/hybrid.md), or, with --local, a launcher that starts
// a real local cluster, runs dp*tp*pp of these processes and compares the
// result with single-process training.
//
// Worker mode: global rank --rank of --world = dp*tp*pp processes. The rank
// holds partition (p, t) of the MLP, trains it in 1F1B order with its tensor-
// and pipeline-parallel peers (worker-to-worker over UCX), and reduces its
// gradients with the other data-parallel replicas of the partition through the
// partition's own Tessel job "<job>.p<p>.t<t>" (zero2 or zero1). Rank 0
// gathers every partition at the end and writes the reassembled parameters
// (--out).
//
// Mixed precision (--precision=fp16|bf16): each partition job keeps half
// parameters and gradients on the worker and on the wire, fp32 masters and
// optimizer state on the servers. The process computes in fp32 from its
// partition's half parameters widened to float, accumulates micro-batch
// gradients in fp32, and rounds each tensor's final gradient to half as it
// becomes ready. Tensor-parallel sums and pipeline activations stay fp32.
//
// Replay mode (--grads=DIR --init=INIT.npy, tools/internal/hybrid_replay.h): no model
// compute; each process feeds its replica's gradient files, sliced to its
// partition, into its partition job. tessel-replay --strategy=hybrid runs it
// through --local.
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/npy.h"
#include "core/precision.h"
#include "core/status_macros.h"
#include "rpc/tls_flags.h"
#include "runtime/cli.h"
#include "runtime/log.h"
#include "testing/cluster_flags.h"
#include "testing/local_cluster.h"
#include "tools/internal/hybrid_launch.h"
#include "tools/internal/hybrid_mlp.h"
#include "tools/internal/hybrid_replay.h"
#include "tools/internal/mlp_job.h"
#include "worker/collectives.h"
#include "worker/hybrid.h"
#include "worker/pipeline_stage.h"
#include "worker/train_flags.h"
#include "worker/worker_flags.h"

ABSL_FLAG(std::string, job, "hybrid", "base job name: partitions are <job>.p<p>.t<t>");
ABSL_FLAG(int, rank, 0, "this process's global rank in [0, dp*tp*pp)");
ABSL_FLAG(int, world, 1, "number of processes; must equal dp*tp*pp");
ABSL_FLAG(int, servers, 2, "shard servers (worker mode: ranks 0..n-1 of the pool; 0 = all)");
ABSL_FLAG(std::string, out, "", "rank 0 writes the final reassembled parameters here (.npy)");
ABSL_FLAG(int, log_every, 0, "print the loss every N steps (0 = ten times per run)");
ABSL_FLAG(int, sync_grads_every, 0,
          "every N steps, query each partition's data-parallel mean gradient "
          "(Worker::SynchronizeGradients) before the step and print rank 0's norm; "
          "the training itself is unchanged (0 = never)");
ABSL_FLAG(bool, local, false,
          "launcher: start a local cluster (--servers shard servers, embedded registry), run "
          "dp*tp*pp worker processes and compare with single-process training");
ABSL_FLAG(int, timeout_s, 600, "launcher: stop everything after this many seconds");
ABSL_FLAG(double, tolerance, 1e-6, "launcher: largest relative difference accepted");
ABSL_FLAG(std::string, init, "",
          "replay mode: initial parameters, 1-D float32 .npy of the MLP's parameter count");
ABSL_FLAG(std::string, grads, "",
          "replay mode: directory of step{k}_rank{d}.npy (or step{k}_rank{d}_micro{m}.npy with "
          "--micro_batches > 1) holding the whole flat gradient of replica d; replaces the model "
          "compute and the comparison with single-process training");

namespace {

volatile int g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// Exit codes: 1 a failure while running, 2 a configuration refused up front.
int Fail(const absl::Status& s, int code = 1) {
  std::cerr << "tessel-hybrid-train: " << s.message() << "\n";
  return code;
}

int LogEvery(int steps) {
  const int every = absl::GetFlag(FLAGS_log_every);
  return every > 0 ? every : std::max(1, steps / 10);
}

bool ReplayMode() { return !absl::GetFlag(FLAGS_grads).empty(); }

// The model flags of a hybrid job: tensor and pipeline parallelism compute
// on the CPU only.
absl::StatusOr<tessel::MlpJobConfig> HybridMlpFromFlags() {
  TESSEL_ASSIGN_OR_RETURN(tessel::MlpJobConfig mlp, tessel::MlpJobFromFlags());
  if (mlp.device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", mlp.device,
                     ": hybrid (tensor/pipeline-parallel) jobs compute on the CPU only"));
  }
  return mlp;
}

// Everything the processes of one job must agree on besides dp/tp/pp.
std::string Fingerprint(const tessel::MlpJobConfig& mlp, int steps) {
  std::vector<std::string> flags = tessel::ForwardedTrainFlags();
  std::vector<std::string> keep;
  for (const std::string& f : flags) {
    if (f.rfind("--ucx_tls", 0) != 0 && f.rfind("--shuffle_seed", 0) != 0) keep.push_back(f);
  }
  return absl::StrCat("layers=", absl::StrJoin(mlp.layers, ","), " batch=", mlp.batch,
                      " samples=", mlp.samples, " data_seed=", mlp.data_seed,
                      " init_seed=", mlp.init_seed, " steps=", steps, " ", absl::StrJoin(keep, " "),
                      ReplayMode() ? absl::StrCat(" replay init=", absl::GetFlag(FLAGS_init),
                                                  " grads=", absl::GetFlag(FLAGS_grads))
                                   : std::string());
}

// Rank 0 gathers partition (p, t) from replica 0 of each, checks replicated
// tensors agree, and writes the full parameters. Others with d = 0 send.
// What is collected is what the workers hold: with mixed precision the
// masters rounded to half (widened to float). `job` (for the test accuracy)
// is null in replay mode.
absl::Status CollectFinal(tessel::HybridSession& session, const tessel::model::SplitMlp& split,
                          const tessel::MlpJob* job, int64_t steps) {
  const tessel::HybridConfig& c = session.config();
  std::vector<float> mine;
  if (session.coords().d == 0) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> params, session.worker().GatherAll());
    mine = std::move(params);
  }
  absl::StatusOr<std::vector<float>> full = tessel::CollectPartitions(
      session.peers(), c, session.rank(), split.plan(), std::move(mine), steps);
  if (!full.ok() || session.rank() != 0) return full.status();
  if (job != nullptr) {
    std::printf("rank 0: %d partitions reassembled into %zu parameters; test accuracy %.2f%%\n",
                c.pp * c.tp, full->size(), 100.0 * job->TestAccuracy(full->data()));
  } else {
    std::printf("rank 0: %d partitions reassembled into %zu parameters\n", c.pp * c.tp,
                full->size());
  }
  std::fflush(stdout);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::OkStatus();
  return tessel::WriteNpyF32(out, *full);
}

// The training loop of one process: 1F1B over the replica's micro-batches,
// then the partition job's Step(), for steps [worker.step(), steps).
absl::Status TrainLoop(tessel::HybridSession& hs, const tessel::model::SplitMlp& split,
                       const tessel::MlpJob& job, int steps) {
  const tessel::HybridConfig& config = hs.config();
  const tessel::RankCoords me = hs.coords();
  const int rank = hs.rank();
  const int batch = job.config().batch;
  tessel::Worker& worker = hs.worker();
  tessel::HybridMlpStage stage(split, config, rank, &hs.peers());
  // Mixed precision: the stage computes in fp32 from the half parameters
  // widened to float (work_params) into fp32 gradients (work_grads); each
  // tensor's gradient is rounded to half as it becomes final and handed over.
  const std::optional<tessel::HalfType> half = worker.half_type();
  const size_t n = split.partition_size(me.p);
  std::vector<float> work_params(half ? n : 0), work_grads(half ? n : 0);
  auto ready = [&](int64_t begin, int64_t end) {
    if (half) {
      tessel::FloatToHalf(*half, work_grads.data() + begin, worker.half_grads().data() + begin,
                          static_cast<size_t>(end - begin));
    }
    return worker.GradientsReady(begin, end);
  };
  // Loss logging: the last stage's tensor rank 0 of every replica has its
  // replica's loss; they and rank 0 (contributing 0 unless it is one of them)
  // sum it, and rank 0 prints the mean over the global batch.
  const bool loss_rank = me.p == config.pp - 1 && me.t == 0;
  std::vector<int> loss_group = {0};
  for (int d = 0; d < config.dp; ++d) {
    const int r = tessel::RankOf(config, {d, config.pp - 1, 0});
    if (r != 0) loss_group.push_back(r);
  }
  const bool in_loss_group = loss_rank || rank == 0;
  const int log_every = LogEvery(steps);
  absl::Time window = absl::Now();
  int window_steps = 0;
  // A shard server died: every process rolls back to a common checkpoint
  // (HybridSession::Recover) and the loop goes on from there; batch k is a
  // function of k, so the rerun is the run that would have happened.
  auto recovered = [&](absl::Status s, int64_t* k) {
    s = hs.Recover(s);
    if (s.ok()) {
      *k = worker.step() - 1;
      window = absl::Now();
      window_steps = 0;
    }
    return s;
  };
  for (int64_t k = worker.step(); k < steps; ++k) {
    tessel::model::Dataset b = job.Batch(k, me.d, config.dp);
    if (half) tessel::HalfToFloat(*half, worker.half_params().data(), work_params.data(), n);
    absl::Span<const float> params = half ? absl::MakeConstSpan(work_params) : worker.params();
    absl::Span<float> grads = half ? absl::MakeSpan(work_grads) : worker.grads();
    auto loss = stage.Step(k, params, b.x.data(), b.y.data(), batch, grads, ready);
    if (!loss.ok()) {
      TESSEL_RETURN_IF_ERROR(recovered(loss.status(), &k));
      continue;
    }
    const int sync_every = absl::GetFlag(FLAGS_sync_grads_every);
    if (sync_every > 0 && (k + 1) % sync_every == 0) {
      // The seeds' hybrid optimizer throws here; each partition's job is the
      // data-parallel sub-group, so the query is that job's mean.
      auto mean = worker.SynchronizeGradients();
      if (!mean.ok()) {
        TESSEL_RETURN_IF_ERROR(recovered(mean.status(), &k));
        continue;
      }
      double sq = 0;
      for (float g : *mean) sq += static_cast<double>(g) * g;
      if (rank == 0) {
        std::printf(
            "step %5lld: partition (stage 0, tensor rank 0) data-parallel mean gradient "
            "norm %.6g\n",
            static_cast<long long>(k + 1), std::sqrt(sq));
        std::fflush(stdout);
      }
    }
    absl::Status s = worker.Step();
    if (!s.ok()) {
      TESSEL_RETURN_IF_ERROR(recovered(s, &k));
      continue;
    }
    ++window_steps;
    if (in_loss_group && ((k + 1) % log_every == 0 || k + 1 == steps)) {
      std::vector<float> sum = {loss_rank ? *loss : 0.0f};
      s = tessel::AllReduceSum(hs.peers(), loss_group,
                               tessel::HybridTag(tessel::HybridMessage::kLoss, k, 0, 0),
                               absl::MakeSpan(sum), absl::StrCat("the loss of step ", k));
      if (!s.ok()) {
        TESSEL_RETURN_IF_ERROR(recovered(s, &k));
        continue;
      }
      if (rank == 0) {
        const double secs = absl::ToDoubleSeconds(absl::Now() - window);
        std::printf("step %5lld/%d  loss %.4f  %.2f ms/step\n", static_cast<long long>(k + 1),
                    steps, sum[0] / config.dp, 1e3 * secs / window_steps);
        std::fflush(stdout);
      }
      window = absl::Now();
      window_steps = 0;
    }
  }
  return absl::OkStatus();
}

// Replay: per step, replica d's gradient files (tools/internal/hybrid_replay.h)
// sliced to this process's partition go into the partition job: with one
// micro-batch straight into grads(), with several through
// Worker::AccumulateGradients (sum in order, mean at Step). Mixed precision
// has no fp32 gradient buffer on the worker: the same sum and division run
// here, and the mean is rounded to half.
absl::Status ReplayLoop(tessel::HybridSession& hs, const tessel::model::SplitMlp& split,
                        int steps) {
  const tessel::HybridConfig& config = hs.config();
  const tessel::RankCoords me = hs.coords();
  tessel::Worker& worker = hs.worker();
  const std::optional<tessel::HalfType> half = worker.half_type();
  const std::string dir = absl::GetFlag(FLAGS_grads);
  const size_t full_size = split.model().num_params();
  const int micro_batches = config.micro_batches;
  const int log_every = LogEvery(steps);
  std::vector<float> mean;
  for (int64_t k = worker.step(); k < steps; ++k) {
    for (int m = 0; m < micro_batches; ++m) {
      const std::string path = tessel::HybridReplayGradPath(dir, k, me.d, m, micro_batches);
      TESSEL_ASSIGN_OR_RETURN(std::vector<float> g, tessel::ReadHybridReplayGrad(path, full_size));
      std::vector<float> part = split.Slice(g, me.p, me.t);
      if (half) {
        if (m == 0) {
          mean = std::move(part);
        } else {
          for (size_t i = 0; i < mean.size(); ++i) mean[i] += part[i];
        }
      } else if (micro_batches > 1) {
        TESSEL_RETURN_IF_ERROR(worker.AccumulateGradients(part));
      } else {
        std::copy(part.begin(), part.end(), worker.grads().begin());
      }
    }
    if (half) {
      if (micro_batches > 1) {
        const float count = static_cast<float>(micro_batches);
        for (float& v : mean) v /= count;
      }
      tessel::FloatToHalf(*half, mean.data(), worker.half_grads().data(), mean.size());
    }
    absl::Status s = worker.Step();
    if (!s.ok()) {
      // A shard server died: every partition rolls back together.
      TESSEL_RETURN_IF_ERROR(hs.Recover(s));
      k = worker.step() - 1;
      continue;
    }
    if (hs.rank() == 0 && ((k + 1) % log_every == 0 || k + 1 == steps)) {
      std::printf("step %5lld/%d replayed\n", static_cast<long long>(k + 1), steps);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

int RunWorker() {
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world);
  const tessel::HybridConfig config = tessel::HybridConfigFromFlags();
  const bool replay = ReplayMode();
  tessel::SetLogLabel(absl::StrCat("hybrid[", rank, "]"));
  // Configuration first: nothing is started for a job that cannot run.
  auto mlp = HybridMlpFromFlags();
  if (!mlp.ok()) return Fail(mlp.status(), 2);
  if (replay) {
    if (absl::GetFlag(FLAGS_init).empty()) {
      return Fail(absl::InvalidArgumentError("replay mode (--grads) needs --init=INIT.npy"), 2);
    }
    mlp->batch = config.micro_batches;  // replay has no batch: the files are the micro-batches
  }
  auto split = tessel::ValidateHybrid(config, world, *mlp);
  if (!split.ok()) return Fail(split.status(), 2);
  if (rank < 0 || rank >= world) {
    return Fail(absl::InvalidArgumentError(
                    absl::StrCat("--rank=", rank, " is outside [0, --world=", world, ")")),
                2);
  }
  auto precision = tessel::PrecisionFromFlags();
  if (!precision.ok()) return Fail(precision.status(), 2);
  auto optimizer = tessel::OptimizerFromFlags();
  if (!optimizer.ok()) return Fail(optimizer.status(), 2);
  auto strategy = tessel::StrategyFromFlags();
  if (!strategy.ok()) return Fail(strategy.status(), 2);
  if (absl::Status st = tessel::ValidateHybridStrategy(*strategy); !st.ok()) return Fail(st, 2);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps < 0) return Fail(absl::InvalidArgumentError("--steps must be >= 0"), 2);
  if (absl::GetFlag(FLAGS_registry).empty()) {
    return Fail(absl::InvalidArgumentError("--registry is required (or use --local)"), 2);
  }
  const tessel::RankCoords me = tessel::CoordsOf(config, rank);
  // The whole MLP's initial parameters: the job's initialisation, or (replay)
  // INIT, after every file this replica reads was checked.
  std::vector<float> full;
  std::unique_ptr<tessel::MlpJob> job;
  if (replay) {
    auto init = tessel::ValidateHybridReplayInputs(
        absl::GetFlag(FLAGS_init), absl::GetFlag(FLAGS_grads), split->model(), config.dp,
        config.micro_batches, steps, me.d, me.d + 1);
    if (!init.ok()) return Fail(init.status(), 2);
    full = std::move(*init);
  }

  tessel::HybridOptions o;
  auto worker_options = tessel::WorkerOptionsFromFlags();
  if (!worker_options.ok()) return Fail(worker_options.status(), 2);
  o.worker = std::move(*worker_options);
  if (o.worker.elastic_min_workers != 0 || o.worker.elastic_max_workers != 0 ||
      o.worker.resume_step != -1 || o.worker.checkpoint_interval > absl::ZeroDuration()) {
    return Fail(absl::InvalidArgumentError(
                    "--elastic_min_workers, --elastic_max_workers, --resume_step and "
                    "--checkpoint_every_s are not for "
                    "hybrid jobs: a lost process is replaced (--resume), partitions agree on the "
                    "checkpoint to resume from, and checkpoints follow --checkpoint_every_steps"),
                2);
  }
  o.worker.job = absl::GetFlag(FLAGS_job);
  o.worker.rank = rank;
  o.worker.world_size = world;
  o.worker.num_servers = absl::GetFlag(FLAGS_servers);
  o.config = config;
  o.fingerprint = Fingerprint(*mlp, steps);
  auto session = tessel::HybridSession::Connect(o);
  if (!session.ok()) return Fail(session.status());
  tessel::HybridSession& hs = **session;

  if (!replay) {
    job = std::make_unique<tessel::MlpJob>(*mlp);
    full.resize(job->model().num_params());
    job->Init(full.data());
  }
  std::vector<tessel::TensorDesc> tensors;
  for (const auto& t : split->partition_tensors(me.p)) tensors.push_back({t.name, t.shape});
  tessel::Worker& worker = hs.worker();
  absl::Status s = worker.RegisterLayout(tensors, split->Slice(full, me.p, me.t));
  if (!s.ok()) return Fail(s);
  if (rank == 0) {
    const std::string what =
        replay ? absl::StrCat("replaying ", absl::GetFlag(FLAGS_grads), " (", config.micro_batches,
                              " gradient file(s) per replica and step)")
               : absl::StrCat(config.micro_batches, " micro-batches of ",
                              mlp->batch / config.micro_batches, " rows per replica");
    std::printf(
        "hybrid: dp=%d x tp=%d x pp=%d = %d processes, %s; MLP %s (%zu parameters), precision "
        "%s, %d partition job(s) on %d shard server(s)\n",
        config.dp, config.tp, config.pp, world, what.c_str(),
        absl::StrJoin(mlp->layers, ",").c_str(), split->model().num_params(),
        absl::GetFlag(FLAGS_precision).c_str(), config.tp * config.pp, worker.num_servers());
    std::fflush(stdout);
  }
  s = replay ? ReplayLoop(hs, *split, steps) : TrainLoop(hs, *split, *job, steps);
  if (!s.ok()) return Fail(s);
  s = CollectFinal(hs, *split, job.get(), steps);
  if (!s.ok()) return Fail(s);
  s = hs.Finish();
  if (!s.ok()) return Fail(s);
  return 0;
}

int RunLocal() {
  tessel::SetLogLabel("hybrid-launcher");
  tessel::SetMinLogLevel(tessel::LogLevel::kWarning);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const tessel::HybridConfig config = tessel::HybridConfigFromFlags();
  const bool replay = ReplayMode();
  auto mlp = HybridMlpFromFlags();
  if (!mlp.ok()) return Fail(mlp.status(), 2);
  if (replay) mlp->batch = config.micro_batches;  // replay has no batch
  auto split = tessel::ValidateHybrid(config, config.world(), *mlp);
  if (!split.ok()) return Fail(split.status(), 2);
  auto optimizer = tessel::OptimizerFromFlags();
  if (!optimizer.ok()) return Fail(optimizer.status(), 2);
  auto strategy = tessel::StrategyFromFlags();
  if (!strategy.ok()) return Fail(strategy.status(), 2);
  if (absl::Status st = tessel::ValidateHybridStrategy(*strategy); !st.ok()) return Fail(st, 2);
  auto precision = tessel::PrecisionFromFlags();
  if (!precision.ok()) return Fail(precision.status(), 2);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (steps < 0) return Fail(absl::InvalidArgumentError("--steps must be >= 0"), 2);
  const int servers = absl::GetFlag(FLAGS_servers);
  if (servers < 1) return Fail(absl::InvalidArgumentError("--servers must be >= 1"), 2);
  if (absl::GetFlag(FLAGS_checkpoint_every_steps) != 0 || absl::GetFlag(FLAGS_checkpoint_initial) ||
      absl::GetFlag(FLAGS_resume)) {
    return Fail(
        absl::InvalidArgumentError(
            "--checkpoint_every_steps/--checkpoint_initial/--resume are for worker mode: --local "
            "starts its shard servers without a checkpoint directory. Run the registry, "
            "tessel-server --checkpoint_dir=DIR and the processes yourself "
            "(docs/hybrid_design.md, Recovery)"),
        2);
  }
  const std::string out_flag = absl::GetFlag(FLAGS_out);
  if (replay) {
    // Every input is checked before anything starts: bad input changes nothing.
    if (absl::GetFlag(FLAGS_init).empty() || out_flag.empty()) {
      return Fail(absl::InvalidArgumentError("replay mode (--grads) needs --init and --out"), 2);
    }
    auto init =
        tessel::ValidateHybridReplayInputs(absl::GetFlag(FLAGS_init), absl::GetFlag(FLAGS_grads),
                                           split->model(), config.dp, config.micro_batches, steps);
    if (!init.ok()) return Fail(init.status(), 2);
  }

  tessel::ClusterOptions copt;
  copt.servers = servers;
  copt.run_dir = tessel::MakeRunDir("tessel-hybrid");
  if (!absl::GetFlag(FLAGS_ucx_tls).empty()) copt.ucx_tls = absl::GetFlag(FLAGS_ucx_tls);
  copt.tls = tessel::TlsOptionsFromFlags();
  copt.insecure = tessel::InsecureClusterFromFlags();
  tessel::LocalCluster cluster(copt);
  std::printf("tessel-hybrid-train --local: %d shard servers + %d worker processes; logs in %s\n",
              servers, config.world(), copt.run_dir.c_str());
  std::fflush(stdout);
  const absl::Time t0 = absl::Now();
  absl::Status s = cluster.Start();
  if (!s.ok()) return Fail(s);

  char self[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  tessel::HybridLaunchOptions o;
  o.config = config;
  o.servers = servers;
  o.job = absl::GetFlag(FLAGS_job);
  o.args = tessel::ForwardedTrainFlags();
  for (const std::string& a : tessel::ForwardedMlpFlags()) o.args.push_back(a);
  o.args.push_back(absl::StrCat("--log_every=", LogEvery(steps)));
  o.args.push_back(absl::StrCat("--step_timeout_s=", absl::GetFlag(FLAGS_step_timeout_s)));
  o.args.push_back(absl::StrCat("--sync_grads_every=", absl::GetFlag(FLAGS_sync_grads_every)));
  if (replay) {
    o.args.push_back(absl::StrCat("--init=", absl::GetFlag(FLAGS_init)));
    o.args.push_back(absl::StrCat("--grads=", absl::GetFlag(FLAGS_grads)));
  }
  // Rank 0 writes the result only once every step is done.
  o.out = out_flag.empty() ? copt.run_dir + "/final.npy" : out_flag;
  o.ucx_tls = copt.ucx_tls;
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  s = tessel::RunHybridWorkers(&cluster, std::string(self, len > 0 ? len : 0), o, &g_stop);
  cluster.Stop();
  if (!s.ok()) return Fail(s);
  std::printf("cluster run finished in %.1f s (including start-up)\n",
              absl::ToDoubleSeconds(absl::Now() - t0));
  if (replay) {
    // No model to train here, so no reference to compute: the result equals
    // flat single-process training on the same files (tools/internal/hybrid_replay.h).
    std::printf("replayed %d steps x %d replicas (dp=%d x tp=%d x pp=%d) -> %s\n", steps, config.dp,
                config.dp, config.tp, config.pp, o.out.c_str());
    return 0;
  }
  auto final_params = tessel::ReadNpyF32(o.out);
  if (!final_params.ok()) return Fail(final_params.status());
  tessel::MlpJob job(*mlp);
  auto diffs =
      tessel::CompareWithReferences(job, *optimizer, config, steps, *final_params, *precision);
  if (!diffs.ok()) return Fail(diffs.status());
  std::printf(
      "max relative difference vs the single-process hybrid reference: %.3g "
      "(tolerance %g)\n",
      diffs->hybrid, absl::GetFlag(FLAGS_tolerance));
  std::printf(
      "for information, vs the unsplit MLP (TrainReference): max relative %.3g with "
      "the same micro-batches, %.3g with whole batches (normwise %.3g, %.3g)\n",
      diffs->unsplit_same_micro_batches, diffs->unsplit_whole_batch,
      diffs->unsplit_same_micro_batches_norm, diffs->unsplit_whole_batch_norm);
  if (!(diffs->hybrid <= absl::GetFlag(FLAGS_tolerance))) {
    return Fail(absl::InternalError("the hybrid run differs from its single-process reference"));
  }
  std::printf("OK\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Hybrid data x tensor x pipeline parallel MLP training (docs/hybrid.md).\n\n"
      "One process:  tessel-hybrid-train --registry=HOST:PORT --rank=R --world=W\n"
      "                  --dp=D --tp=T --pp=P --micro_batches=M [--servers=S]\n"
      "                  [--layers=16,32,32,4 --batch=8 --steps=5 --optimizer=adam ...]\n"
      "                  [--strategy=zero2|zero1] [--precision=fp32|fp16|bf16]\n"
      "Local cluster: tessel-hybrid-train --local --dp=2 --tp=2 --pp=2 --micro_batches=4 ...\n"
      "W must equal D*T*P; rank R holds pipeline stage (R / T) % P, tensor rank R % T of\n"
      "data-parallel replica R / (T*P).\n\n"
      "Replay (no model compute, no comparison; what tessel-replay --strategy=hybrid runs):\n"
      "  tessel-hybrid-train --local --grads=DIR --init=INIT.npy --out=FINAL.npy --layers=...\n"
      "      --dp=D --tp=T --pp=P --micro_batches=M --steps=K [--optimizer ... --precision ...]\n"
      "INIT: the MLP's flat parameter vector (length = its parameter count). Replica d's\n"
      "gradient of step k: DIR/step{k}_rank{d}.npy, or with M > 1 the mean of\n"
      "DIR/step{k}_rank{d}_micro{m}.npy for m in [0, M); each the whole flat vector.");
  tessel::ParseFlags(argc, argv);
  return absl::GetFlag(FLAGS_local) ? RunLocal() : RunWorker();
}
