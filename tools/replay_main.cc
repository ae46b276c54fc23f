// tessel-replay: feeds a fixed gradient sequence through a real local cluster
// and writes the final parameters. A contract other tools and tests rely on:
//
//   tessel-replay --init=INIT.npy --grads=DIR --steps=K --workers=W --servers=S
//                 --strategy=zero2 --optimizer=adam [--lr ...] --out=FINAL.npy
//
// DIR holds step{k}_rank{r}.npy for k in [0, K), r in [0, W): 1-D float32,
// the same length as INIT. Each step applies the mean over ranks of that
// step's files. .npy files must be version 1.0, '<f4', C order.
//
// Hybrid (data x tensor x pipeline parallelism, docs/hybrid.md):
//
//   tessel-replay --strategy=hybrid --layers=16,32,32,4 --dp=D --tp=T --pp=P
//                 [--micro_batches=M] [--partition_strategy=zero2|zero1] ...
//
// INIT is the MLP's flat parameter vector (its length must equal the MLP's
// parameter count); replica d's gradient of step k is step{k}_rank{d}.npy,
// or with M > 1 the mean of step{k}_rank{d}_micro{m}.npy, m in [0, M). The
// D*T*P processes each step their partition's slice; the result equals flat
// training on the same files bit for bit (tools/internal/hybrid_replay.h). This hands
// over to tessel-hybrid-train --local, which checks every file first.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/npy.h"
#include "rpc/tls_flags.h"
#include "runtime/cli.h"
#include "runtime/log.h"
#include "testing/cluster_flags.h"
#include "testing/local_cluster.h"
#include "testing/process.h"
#include "tools/internal/hybrid_mlp.h"
#include "tools/internal/mlp_job.h"
#include "worker/train_flags.h"

ABSL_FLAG(std::string, init, "", "initial parameters: 1-D float32 .npy (required)");
ABSL_FLAG(std::string, grads, "", "directory of step{K}_rank{R}.npy (required)");
ABSL_FLAG(std::string, out, "", "where to write the final parameters (.npy, required)");
ABSL_FLAG(int, servers, 2, "shard server processes");
ABSL_FLAG(int, workers, 2, "worker processes (ranks whose gradient files are read)");
ABSL_FLAG(int, timeout_s, 600, "give up (and stop everything) after this many seconds");
ABSL_FLAG(std::string, partition_strategy, "zero2",
          "with --strategy=hybrid: each partition job's strategy (zero2 or zero1)");

namespace {
volatile int g_stop = 0;
void OnSignal(int) { g_stop = 1; }
int Fail(const absl::Status& s) {
  std::cerr << "tessel-replay: " << s.message() << "\n";
  return 1;
}

// --strategy=hybrid: tessel-hybrid-train --local in replay mode, with the
// same flags (it validates every input before starting anything).
int RunHybrid() {
  if (absl::GetFlag(FLAGS_init).empty() || absl::GetFlag(FLAGS_grads).empty() ||
      absl::GetFlag(FLAGS_out).empty()) {
    return Fail(absl::InvalidArgumentError("--init, --grads and --out are required"));
  }
  std::vector<std::string> args = {tessel::FindBinary("tools/tessel-hybrid-train"), "--local"};
  for (const std::string& a : tessel::ForwardedTrainFlags()) args.push_back(a);
  for (const std::string& a : tessel::ForwardedMlpFlags()) args.push_back(a);
  // The partitions' strategy (the last value wins over the forwarded one).
  args.push_back("--strategy=" + absl::GetFlag(FLAGS_partition_strategy));
  args.push_back(absl::StrCat("--dp=", absl::GetFlag(FLAGS_dp)));
  args.push_back(absl::StrCat("--tp=", absl::GetFlag(FLAGS_tp)));
  args.push_back(absl::StrCat("--pp=", absl::GetFlag(FLAGS_pp)));
  args.push_back(absl::StrCat("--servers=", absl::GetFlag(FLAGS_servers)));
  args.push_back(absl::StrCat("--timeout_s=", absl::GetFlag(FLAGS_timeout_s)));
  args.push_back("--job=replay");
  args.push_back("--init=" + absl::GetFlag(FLAGS_init));
  args.push_back("--grads=" + absl::GetFlag(FLAGS_grads));
  args.push_back("--out=" + absl::GetFlag(FLAGS_out));
  std::vector<char*> argv_exec;
  for (std::string& a : args) argv_exec.push_back(a.data());
  argv_exec.push_back(nullptr);
  execv(argv_exec[0], argv_exec.data());
  return Fail(absl::NotFoundError(absl::StrCat("cannot run ", args[0])));
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Replays fixed gradients through a real local Tessel cluster.\n\n"
      "Usage: tessel-replay --init=INIT.npy --grads=DIR --steps=K --workers=W --servers=S\n"
      "         --strategy=zero2|zero1|ddp|fsdp|hybrid --optimizer=sgd|adam|adamw|rmsprop|adagrad "
      "[--lr "
      "--momentum\n"
      "         --dampening --nesterov --weight_decay --beta1 --beta2 --eps --alpha --centered\n"
      "         --lr_decay --initial_accumulator_value] --out=OUT.npy\n\n"
      "DIR/step{k}_rank{r}.npy: 1-D float32 gradients, k in [0,K), r in [0,W).\n"
      "Each step applies the mean over ranks, as data-parallel training does.\n\n"
      "Hybrid DPxTPxPP: tessel-replay --strategy=hybrid --layers=16,32,32,4 --dp=D --tp=T "
      "--pp=P\n"
      "         [--micro_batches=M] [--partition_strategy=zero2|zero1] [--precision=...] "
      "--init --grads --out ...\n"
      "INIT is the MLP's flat parameter vector (length = its parameter count); replica d's\n"
      "gradient of step k is DIR/step{k}_rank{d}.npy, or with M > 1 the mean (sum in order,\n"
      "divided by M) of DIR/step{k}_rank{d}_micro{m}.npy, m in [0,M). --workers is unused:\n"
      "D*T*P processes run. The result equals flat training on the same files.");
  tessel::SetDefaultLogLevel(tessel::LogLevel::kWarning);
  tessel::ParseFlags(argc, argv);
  if (absl::GetFlag(FLAGS_strategy) == "hybrid") return RunHybrid();
  tessel::SetLogLabel("replay");
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (absl::GetFlag(FLAGS_init).empty() || absl::GetFlag(FLAGS_grads).empty() ||
      absl::GetFlag(FLAGS_out).empty()) {
    return Fail(absl::InvalidArgumentError("--init, --grads and --out are required"));
  }
  auto optimizer = tessel::OptimizerFromFlags();
  if (!optimizer.ok()) return Fail(optimizer.status());
  auto strategy = tessel::StrategyFromFlags();
  if (!strategy.ok()) return Fail(strategy.status());
  auto precision = tessel::PrecisionFromFlags();
  if (!precision.ok()) return Fail(precision.status());
  const int workers = absl::GetFlag(FLAGS_workers);
  const int servers = absl::GetFlag(FLAGS_servers);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (workers < 1 || servers < 1 || steps < 0) {
    return Fail(absl::InvalidArgumentError("--workers and --servers must be >= 1, --steps >= 0"));
  }
  // Check every input before starting anything: bad input changes nothing.
  auto init = tessel::ReadNpyF32(absl::GetFlag(FLAGS_init));
  if (!init.ok()) return Fail(init.status());
  for (int k = 0; k < steps; ++k) {
    for (int r = 0; r < workers; ++r) {
      const std::string path =
          absl::StrCat(absl::GetFlag(FLAGS_grads), "/step", k, "_rank", r, ".npy");
      auto g = tessel::ReadNpyF32(path);
      if (!g.ok()) return Fail(g.status());
      if (g->size() != init->size()) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(
            path, " has ", g->size(), " floats; the initial parameters have ", init->size())));
      }
    }
  }

  tessel::ClusterOptions copt;
  copt.servers = servers;
  copt.run_dir = tessel::MakeRunDir("tessel-replay");
  if (!absl::GetFlag(FLAGS_ucx_tls).empty()) copt.ucx_tls = absl::GetFlag(FLAGS_ucx_tls);
  copt.server_args.push_back(
      absl::StrCat("--ucx_zero_copy=", absl::GetFlag(FLAGS_ucx_zero_copy) ? "true" : "false"));
  copt.tls = tessel::TlsOptionsFromFlags();
  copt.insecure = tessel::InsecureClusterFromFlags();
  tessel::LocalCluster cluster(copt);
  absl::Status s = cluster.Start();
  if (!s.ok()) return Fail(s);
  std::vector<std::string> args = tessel::ForwardedTrainFlags();
  args.push_back("--job=replay");
  args.push_back("--init=" + absl::GetFlag(FLAGS_init));
  args.push_back("--grads=" + absl::GetFlag(FLAGS_grads));
  args.push_back("--out=" + absl::GetFlag(FLAGS_out));
  s = cluster.RunWorkers(workers, args, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)), &g_stop,
                         /*show_rank0=*/false);
  cluster.Stop();
  if (!s.ok()) return Fail(s);
  std::printf("replayed %d steps x %d workers through %d shard servers -> %s\n", steps, workers,
              servers, absl::GetFlag(FLAGS_out).c_str());
  return 0;
}
