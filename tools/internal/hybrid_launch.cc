#include "tools/internal/hybrid_launch.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessel {

absl::Status RunHybridWorkers(LocalCluster* cluster, const std::string& binary,
                              const HybridLaunchOptions& o, const volatile int* stop_requested) {
  const int world = o.config.world();
  std::vector<std::string> names;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {binary,
                                     absl::StrCat("--registry=", cluster->registry_address()),
                                     absl::StrCat("--job=", o.job),
                                     absl::StrCat("--rank=", r),
                                     absl::StrCat("--world=", world),
                                     absl::StrCat("--dp=", o.config.dp),
                                     absl::StrCat("--tp=", o.config.tp),
                                     absl::StrCat("--pp=", o.config.pp),
                                     absl::StrCat("--micro_batches=", o.config.micro_batches),
                                     absl::StrCat("--servers=", o.servers)};
    for (std::string& f : TlsFlags(cluster->tls())) argv.push_back(std::move(f));
    for (std::string& f : cluster->WorkerCredentialFlags()) argv.push_back(std::move(f));
    argv.insert(argv.end(), o.args.begin(), o.args.end());
    argv.push_back(absl::StrCat("--ucx_tls=", o.ucx_tls));
    if (r == 0 && !o.out.empty()) argv.push_back(absl::StrCat("--out=", o.out));
    const std::string name = absl::StrCat(o.job, "-rank", r);
    TESSEL_RETURN_IF_ERROR(cluster->processes().Start(name, argv, o.show_rank0 && r == 0));
    names.push_back(name);
  }
  return cluster->processes().WaitAll(names, o.timeout, stop_requested);
}

}  // namespace tessel
