// Starts the processes of a hybrid (data x tensor x pipeline) MLP job on a
// LocalCluster: dp*tp*pp tessel-hybrid-train processes, global ranks
// 0..dp*tp*pp-1, and waits for all of them. Shared by tessel-hybrid-train
// --local and tests/hybrid_test.cc.
//
// Example:
//   LocalCluster cluster({.servers = 2, .run_dir = MakeRunDir("hybrid")});
//   RETURN_IF_ERROR(cluster.Start());
//   HybridLaunchOptions o;
//   o.config = {.dp = 2, .tp = 2, .pp = 1, .micro_batches = 4};
//   o.args = {"--layers=16,32,32,4", "--steps=5"};
//   o.out = cluster.run_dir() + "/final.npy";
//   RETURN_IF_ERROR(RunHybridWorkers(&cluster, FindBinary("tools/tessel-hybrid-train"), o));
#ifndef TESSEL_TOOLS_INTERNAL_HYBRID_LAUNCH_H_
#define TESSEL_TOOLS_INTERNAL_HYBRID_LAUNCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "testing/local_cluster.h"
#include "worker/hybrid.h"

namespace tessel {

struct HybridLaunchOptions {
  HybridConfig config;
  int servers = 2;                // shard servers the partition jobs use (the cluster's)
  std::string job = "hybrid";     // base job name
  std::vector<std::string> args;  // forwarded to every process (model, optimizer, --steps, ...)
  std::string out;                // rank 0 writes the reassembled parameters here ("" = no)
  std::string ucx_tls = "posix,sysv,self";
  absl::Duration timeout = absl::Minutes(5);
  bool show_rank0 = true;  // rank 0's stdout on ours
};

// Fails as soon as any process fails (naming it, with its log's tail), or
// after the timeout, or when *stop_requested turns non-zero.
absl::Status RunHybridWorkers(LocalCluster* cluster, const std::string& binary,
                              const HybridLaunchOptions& options,
                              const volatile int* stop_requested = nullptr);

}  // namespace tessel

#endif  // TESSEL_TOOLS_INTERNAL_HYBRID_LAUNCH_H_
