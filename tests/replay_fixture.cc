#include "tests/replay_fixture.h"

#include <sys/wait.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/npy.h"
#include "core/reduce.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "tools/internal/mlp_job.h"

namespace tessel {

ReplayInputs MakeReplayInputs(const std::string& prefix, size_t params, int steps, int ranks,
                              uint32_t seed, int micro_batches) {
  ReplayInputs in;
  in.dir = MakeRunDir(prefix);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  in.init.resize(params);
  for (float& v : in.init) v = normal(rng);
  EXPECT_TRUE(WriteNpyF32(in.dir + "/init.npy", in.init).ok());
  in.grads.assign(steps, std::vector<std::vector<float>>(ranks, std::vector<float>(params)));
  for (int k = 0; k < steps; ++k) {
    for (int r = 0; r < ranks; ++r) {
      for (float& v : in.grads[k][r]) v = 0.1f * normal(rng);
      EXPECT_TRUE(
          WriteNpyF32(absl::StrCat(in.dir, "/step", k, "_rank", r, ".npy"), in.grads[k][r]).ok());
    }
  }
  if (micro_batches > 1) {
    in.micro.assign(steps, std::vector<std::vector<std::vector<float>>>(
                               ranks, std::vector<std::vector<float>>(micro_batches,
                                                                      std::vector<float>(params))));
    for (int k = 0; k < steps; ++k) {
      for (int r = 0; r < ranks; ++r) {
        for (int m = 0; m < micro_batches; ++m) {
          for (float& v : in.micro[k][r][m]) v = 0.1f * normal(rng);
          EXPECT_TRUE(WriteNpyF32(absl::StrCat(in.dir, "/step", k, "_rank", r, "_micro", m, ".npy"),
                                  in.micro[k][r][m])
                          .ok());
        }
      }
    }
  }
  return in;
}

std::vector<float> ReplayReference(const ReplayInputs& in, const OptimizerParams& opt, int workers,
                                   std::optional<HalfType> half, int micro_batches,
                                   bool half_mean) {
  const size_t n = in.init.size();
  std::vector<float> params = in.init, mean(n);
  std::vector<std::vector<float>> state(StateSlots(opt), std::vector<float>(n, 0.f));
  float* s[kMaxStateSlots] = {};
  for (size_t i = 0; i < state.size(); ++i) s[i] = state[i].data();
  InitState(opt, s, n);
  for (size_t k = 0; k < in.grads.size(); ++k) {
    std::vector<std::vector<float>> rounded(workers);
    std::vector<const float*> srcs;
    for (int r = 0; r < workers; ++r) {
      if (micro_batches > 1) {
        rounded[r] = in.micro[k][r][0];
        for (int m = 1; m < micro_batches; ++m) {
          for (size_t i = 0; i < n; ++i) rounded[r][i] += in.micro[k][r][m][i];
        }
        for (float& v : rounded[r]) v /= static_cast<float>(micro_batches);
      } else {
        rounded[r] = in.grads[k][r];
      }
      RoundTrip(half, rounded[r].data(), n);
      srcs.push_back(rounded[r].data());
    }
    ReduceMean(srcs.data(), workers, mean.data(), n);
    if (half_mean) RoundTrip(half, mean.data(), n);
    ApplyUpdate(opt, static_cast<int64_t>(k) + 1, params.data(), mean.data(), s, n);
  }
  RoundTrip(half, params.data(), n);
  return params;
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

}  // namespace tessel
