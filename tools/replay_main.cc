// tessel-replay: feeds a fixed gradient sequence through a real local cluster
// and writes the final parameters. A contract other tools and tests rely on:
//
//   tessel-replay --init=INIT.npy --grads=DIR --steps=K --workers=W --servers=S
//                 --strategy=zero2 --optimizer=adam [--lr ...] --out=FINAL.npy
//
// DIR holds step{k}_rank{r}.npy for k in [0, K), r in [0, W): 1-D float32,
// the same length as INIT. Each step applies the mean over ranks of that
// step's files. .npy files must be version 1.0, '<f4', C order.
#include <csignal>
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/npy.h"
#include "rpc/tls_flags.h"
#include "tools/cluster.h"
#include "tools/train_flags.h"

ABSL_FLAG(std::string, init, "", "initial parameters: 1-D float32 .npy (required)");
ABSL_FLAG(std::string, grads, "", "directory of step{K}_rank{R}.npy (required)");
ABSL_FLAG(std::string, out, "", "where to write the final parameters (.npy, required)");
ABSL_FLAG(int, servers, 2, "shard server processes");
ABSL_FLAG(int, workers, 2, "worker processes (ranks whose gradient files are read)");
ABSL_FLAG(int, timeout_s, 600, "give up (and stop everything) after this many seconds");

namespace {
volatile int g_stop = 0;
void OnSignal(int) { g_stop = 1; }
int Fail(const absl::Status& s) {
  std::cerr << "tessel-replay: " << s.message() << "\n";
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Replays fixed gradients through a real local Tessel cluster.\n\n"
      "Usage: tessel-replay --init=INIT.npy --grads=DIR --steps=K --workers=W --servers=S\n"
      "         --strategy=zero2|zero1|ddp --optimizer=sgd|adam|adamw|rmsprop|adagrad [--lr "
      "--momentum\n"
      "         --dampening --nesterov --weight_decay --beta1 --beta2 --eps --alpha --centered\n"
      "         --lr_decay --initial_accumulator_value] --out=OUT.npy\n\n"
      "DIR/step{k}_rank{r}.npy: 1-D float32 gradients, k in [0,K), r in [0,W).\n"
      "Each step applies the mean over ranks, as data-parallel training does.");
  absl::ParseCommandLine(argc, argv);
  tessel::SetLogLabel("replay");
  tessel::SetMinLogLevel(tessel::LogLevel::kWarning);
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
  copt.tls = tessel::TlsOptionsFromFlags();
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
