#include "tools/internal/hybrid_replay.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/npy.h"
#include "core/status_macros.h"

namespace tessel {

std::string HybridReplayGradPath(const std::string& dir, int64_t step, int replica, int micro,
                                 int micro_batches) {
  if (micro_batches <= 1) return absl::StrCat(dir, "/step", step, "_rank", replica, ".npy");
  return absl::StrCat(dir, "/step", step, "_rank", replica, "_micro", micro, ".npy");
}

absl::StatusOr<std::vector<float>> ReadHybridReplayGrad(const std::string& path,
                                                        size_t num_params) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> g, ReadNpyF32(path));
  if (g.size() != num_params) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " has ", g.size(), " floats; the MLP's parameter vector (and INIT) has ",
                     num_params, ": every gradient file holds the whole flat vector"));
  }
  return g;
}

absl::StatusOr<std::vector<float>> ValidateHybridReplayInputs(const std::string& init_path,
                                                              const std::string& dir,
                                                              const model::Mlp& model, int dp,
                                                              int micro_batches, int64_t steps,
                                                              int first_replica, int end_replica) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> init, ReadNpyF32(init_path));
  const size_t n = model.num_params();
  if (init.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        init_path, " has ", init.size(),
        " floats but the MLP --layers=", absl::StrJoin(model.sizes(), ","), " has ", n,
        " parameters: hybrid replay steps that MLP's flat parameter vector; pass the --layers "
        "whose parameter count equals INIT's length"));
  }
  if (end_replica < 0) end_replica = dp;
  for (int64_t k = 0; k < steps; ++k) {
    for (int d = first_replica; d < end_replica; ++d) {
      for (int m = 0; m < micro_batches; ++m) {
        absl::StatusOr<std::vector<float>> g =
            ReadHybridReplayGrad(HybridReplayGradPath(dir, k, d, m, micro_batches), n);
        if (absl::IsNotFound(g.status())) {
          return absl::NotFoundError(absl::StrCat(
              g.status().message(), " (", steps, " steps x ", end_replica - first_replica,
              " replica(s) need step{k}_rank{d}",
              micro_batches > 1 ? absl::StrCat("_micro{m}.npy for m in [0, ", micro_batches, ")")
                                : std::string(".npy"),
              "; check --grads, --steps, --dp and --micro_batches)"));
        }
        TESSEL_RETURN_IF_ERROR(g);
      }
    }
  }
  return init;
}

}  // namespace tessel
