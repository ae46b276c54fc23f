// The correctness contract as a matrix: every strategy x optimizer x workers
// {1, 2, 4} x servers {1, 2, 3}, each a real tessel-replay cluster with
// shuffled bucket arrival, must equal single-process training (contract:
// 1e-6 relative; asserted: bitwise). CI runs a covering subset
// (every value of every axis, and every strategy with every optimizer); set
// TESSEL_FULL_MATRIX=1 for all 180 combinations:
//   TESSEL_FULL_MATRIX=1 bazel test //tests:strategy_matrix_test --test_env=TESSEL_FULL_MATRIX
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/npy.h"
#include "core/optimizer.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "tests/replay_fixture.h"
#include "tools/internal/mlp_job.h"

namespace tessel {
namespace {

constexpr int kMaxWorkers = 4;
constexpr int kSteps = 3;
constexpr size_t kParams = 5000;

struct Opt {
  std::string name;
  OptimizerParams params;
  std::vector<std::string> flags;
};

std::vector<Opt> Optimizers() {
  std::vector<Opt> out;
  OptimizerParams sgd;
  sgd.kind = OptimizerParams::Kind::kSgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01f;
  out.push_back({"sgd",
                 sgd,
                 {"--optimizer=sgd", "--lr=0.05", "--momentum=0.9", "--nesterov=true",
                  "--weight_decay=0.01"}});
  OptimizerParams adam;
  adam.kind = OptimizerParams::Kind::kAdam;
  adam.lr = 0.01f;
  out.push_back({"adam", adam, {"--optimizer=adam", "--lr=0.01"}});
  OptimizerParams adamw = adam;
  adamw.kind = OptimizerParams::Kind::kAdamW;
  adamw.weight_decay = 0.1f;
  out.push_back({"adamw", adamw, {"--optimizer=adamw", "--lr=0.01", "--weight_decay=0.1"}});
  OptimizerParams rms;
  rms.kind = OptimizerParams::Kind::kRmsprop;
  rms.lr = 0.01f;
  rms.momentum = 0.5f;
  rms.centered = true;
  out.push_back(
      {"rmsprop", rms, {"--optimizer=rmsprop", "--lr=0.01", "--momentum=0.5", "--centered=true"}});
  OptimizerParams ada;
  ada.kind = OptimizerParams::Kind::kAdagrad;
  ada.lr = 0.05f;
  ada.lr_decay = 0.01f;
  ada.eps = 1e-10f;
  out.push_back({"adagrad", ada, {"--optimizer=adagrad", "--lr=0.05", "--lr_decay=0.01"}});
  return out;
}

const std::vector<std::string> kStrategies = {"ddp", "zero1", "zero2", "fsdp"};
const std::vector<int> kWorkerCounts = {1, 2, 4};
const std::vector<int> kServerCounts = {1, 2, 3};

using Case = std::tuple<int, int, int, int>;  // strategy, optimizer, workers, servers

std::vector<Case> Cases() {
  std::vector<Case> all;
  const bool full = std::getenv("TESSEL_FULL_MATRIX") != nullptr;
  for (int s = 0; s < 4; ++s) {
    for (int o = 0; o < 5; ++o) {
      for (int w = 0; w < 3; ++w) {
        for (int v = 0; v < 3; ++v) {
          // Covering subset: each (strategy, optimizer) once, with worker and
          // server counts rotating so every count meets every strategy.
          if (full || (w == (s + o) % 3 && v == (2 * s + o) % 3)) all.push_back({s, o, w, v});
        }
      }
    }
  }
  return all;
}

// The data path a case runs on, rotating so each strategy meets each:
// 0 in place (zero-copy shared memory), 1 copied through UCX's queues
// (--ucx_zero_copy=false), 2 no shared memory (--ucx_tls=cma,tcp,self:
// UCX's rendezvous moves the payloads by RMA over cma).
int DataPath(int strategy, int optimizer) { return (strategy + optimizer) % 3; }

// Cases run with --aggregation=host: several workers, full-buffer
// strategies (fsdp stays flat), every other optimizer so each data path meets it.
bool HostAggregated(int strategy, int optimizer, int workers) {
  return kWorkerCounts[static_cast<size_t>(workers)] > 1 && strategy != 3 &&
         (strategy + optimizer) % 2 == 0;
}

class StrategyMatrixTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    in_ = new ReplayInputs(MakeReplayInputs("matrix", kParams, kSteps, kMaxWorkers, 11));
  }
  static ReplayInputs* in_;
};

ReplayInputs* StrategyMatrixTest::in_ = nullptr;

TEST_P(StrategyMatrixTest, EqualsSingleProcess) {
  const auto [s, o, w, v] = GetParam();
  const Opt opt = Optimizers()[o];
  const int workers = kWorkerCounts[w], servers = kServerCounts[v];
  const std::string out = absl::StrCat(in_->dir, "/", kStrategies[s], "_", opt.name, "_w", workers,
                                       "_s", servers, ".npy");
  std::vector<std::string> cmd = {
      FindBinary("tools/tessel-replay"), "--init=" + in_->dir + "/init.npy", "--grads=" + in_->dir,
      absl::StrCat("--steps=", kSteps), absl::StrCat("--workers=", workers),
      absl::StrCat("--servers=", servers), "--strategy=" + kStrategies[s], "--bucket_bytes=4096",
      "--timeout_s=120",
      // Buckets pushed in a random order with random pauses:
      // the result must not change by a single bit.
      absl::StrCat("--shuffle_seed=", 1 + s * 100 + o * 10 + w), "--out=" + out};
  cmd.insert(cmd.end(), opt.flags.begin(), opt.flags.end());
  // Every data path meets every strategy. In place: every payload-memory
  // payload as a descriptor, however small (these buckets are 4 KiB; the
  // default sends only 16 KiB and up so).
  const int path = DataPath(s, o);
  const std::string env = path == 0 ? "TESSEL_UCX_IN_PLACE_MIN_BYTES=0 " : "";
  if (path == 1) cmd.push_back("--ucx_zero_copy=false");
  if (path == 2) cmd.push_back("--ucx_tls=cma,tcp,self");
  // Host aggregation over every data path: the workers of this one host sum
  // first (in rank order: the flat sum itself) and push once per bucket.
  if (HostAggregated(s, o, w)) cmd.push_back("--aggregation=host");
  CommandResult r = RunCommand(env + absl::StrJoin(cmd, " "));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto got = ReadNpyF32(out);
  ASSERT_TRUE(got.ok()) << got.status();
  // The contract is 1e-6 relative; servers reduce in rank order, so the
  // result is in fact bitwise the single-process one, whatever the order.
  EXPECT_EQ(MaxRelativeDifference(*got, ReplayReference(*in_, opt.params, workers)), 0);
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat(
      kStrategies[std::get<0>(info.param)], "_", Optimizers()[std::get<1>(info.param)].name, "_w",
      kWorkerCounts[std::get<2>(info.param)], "_s", kServerCounts[std::get<3>(info.param)],
      std::vector<std::string>{
          "", "_copied",
          "_rma"}[static_cast<size_t>(DataPath(std::get<0>(info.param), std::get<1>(info.param)))],
      HostAggregated(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param))
          ? "_host"
          : "");
}

INSTANTIATE_TEST_SUITE_P(Matrix, StrategyMatrixTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace tessel
