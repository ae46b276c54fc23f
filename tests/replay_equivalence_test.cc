// The correctness contract, end to end: tessel-replay runs a real cluster
// (2 shard servers x 3 worker processes over UCX and gRPC) on fixed
// gradients, and the final parameters must equal single-process training
// (mean gradient in rank order, same optimizer) within 1e-6 relative, and be
// bitwise identical whatever order buckets arrive in. The hybrid replay
// (tessel-replay --strategy=hybrid) must equal the same single-process
// training bitwise.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/npy.h"
#include "core/optimizer.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "tests/replay_fixture.h"
#include "tools/internal/mlp_job.h"

namespace tessel {
namespace {

constexpr int kWorkers = 3;
constexpr int kServers = 2;
constexpr int kSteps = 6;
constexpr size_t kParams = 40000;  // with 16 KiB buckets: 3 buckets per shard

class ReplayEquivalenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    in_ = new ReplayInputs(MakeReplayInputs("replay-test", kParams, kSteps, kWorkers, 7));
    dir_ = &in_->dir;
  }

  static std::vector<float> Reference(const OptimizerParams& opt) {
    return ReplayReference(*in_, opt, kWorkers);
  }

  static CommandResult Replay(const std::string& out, const std::vector<std::string>& flags) {
    std::vector<std::string> cmd = {FindBinary("tools/tessel-replay"),
                                    "--init=" + *dir_ + "/init.npy",
                                    "--grads=" + *dir_,
                                    absl::StrCat("--steps=", kSteps),
                                    absl::StrCat("--workers=", kWorkers),
                                    absl::StrCat("--servers=", kServers),
                                    "--bucket_bytes=16384",
                                    "--timeout_s=120",
                                    "--out=" + out};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    return RunCommand(absl::StrJoin(cmd, " "));
  }

  static std::vector<float> ReplayOk(const std::string& name,
                                     const std::vector<std::string>& flags) {
    const std::string out = *dir_ + "/" + name + ".npy";
    CommandResult r = Replay(out, flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto params = ReadNpyF32(out);
    EXPECT_TRUE(params.ok()) << params.status() << "\n" << r.output;
    return params.ok() ? *params : std::vector<float>();
  }

  static ReplayInputs* in_;
  static std::string* dir_;
};

ReplayInputs* ReplayEquivalenceTest::in_ = nullptr;
std::string* ReplayEquivalenceTest::dir_ = nullptr;

TEST_F(ReplayEquivalenceTest, SgdNesterovMomentumMatchesSingleProcess) {
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kSgd;
  opt.lr = 0.05f;
  opt.momentum = 0.9f;
  opt.nesterov = true;
  opt.weight_decay = 0.01f;
  std::vector<float> got = ReplayOk("sgd", {"--optimizer=sgd", "--lr=0.05", "--momentum=0.9",
                                            "--nesterov=true", "--weight_decay=0.01"});
  EXPECT_LE(MaxRelativeDifference(got, Reference(opt)), 1e-6);
}

TEST_F(ReplayEquivalenceTest, AdamMatchesSingleProcess) {
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kAdam;
  opt.lr = 0.01f;
  opt.weight_decay = 0.01f;
  std::vector<float> got =
      ReplayOk("adam", {"--optimizer=adam", "--lr=0.01", "--weight_decay=0.01"});
  EXPECT_LE(MaxRelativeDifference(got, Reference(opt)), 1e-6);
}

TEST_F(ReplayEquivalenceTest, EveryAvailableStrategyMatchesWithAdamW) {
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kAdamW;
  opt.lr = 0.01f;
  opt.weight_decay = 0.1f;
  const std::vector<float> want = Reference(opt);
  for (const std::string strategy : {"ddp", "zero1", "zero2", "fsdp"}) {
    std::vector<float> got = ReplayOk(
        "adamw_" + strategy,
        {"--strategy=" + strategy, "--optimizer=adamw", "--lr=0.01", "--weight_decay=0.1"});
    EXPECT_LE(MaxRelativeDifference(got, want), 1e-6) << strategy;
  }
}

TEST_F(ReplayEquivalenceTest, RmspropAndAdagradMatchSingleProcess) {
  OptimizerParams rms;
  rms.kind = OptimizerParams::Kind::kRmsprop;
  rms.lr = 0.01f;
  rms.momentum = 0.9f;
  rms.centered = true;
  rms.weight_decay = 0.01f;
  std::vector<float> got =
      ReplayOk("rmsprop", {"--optimizer=rmsprop", "--lr=0.01", "--momentum=0.9", "--centered=true",
                           "--weight_decay=0.01", "--strategy=zero1"});
  EXPECT_LE(MaxRelativeDifference(got, Reference(rms)), 1e-6);
  OptimizerParams ada;
  ada.kind = OptimizerParams::Kind::kAdagrad;
  ada.lr = 0.05f;
  ada.lr_decay = 0.01f;
  ada.initial_accumulator_value = 0.1f;
  ada.eps = 1e-10f;
  got = ReplayOk("adagrad", {"--optimizer=adagrad", "--lr=0.05", "--lr_decay=0.01",
                             "--initial_accumulator_value=0.1", "--strategy=fsdp"});
  EXPECT_LE(MaxRelativeDifference(got, Reference(ada)), 1e-6);
  got = ReplayOk("adagrad_ddp", {"--optimizer=adagrad", "--lr=0.05", "--lr_decay=0.01",
                                 "--initial_accumulator_value=0.1", "--strategy=ddp"});
  EXPECT_LE(MaxRelativeDifference(got, Reference(ada)), 1e-6);
}

TEST_F(ReplayEquivalenceTest, MixedPrecisionMatchesTheMixedPrecisionReference) {
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kAdamW;
  opt.lr = 0.01f;
  opt.weight_decay = 0.1f;
  const std::vector<float> fp32 = Reference(opt);
  for (auto [name, half] : {std::pair<std::string, HalfType>{"fp16", HalfType::kF16},
                            std::pair<std::string, HalfType>{"bf16", HalfType::kBF16}}) {
    for (const std::string strategy : {"zero1", "zero2", "fsdp", "ddp"}) {
      std::vector<float> got =
          ReplayOk(name + "_" + strategy, {"--precision=" + name, "--strategy=" + strategy,
                                           "--optimizer=adamw", "--lr=0.01", "--weight_decay=0.1"});
      // Tolerance stated: bitwise against the mixed-precision reference (for
      // DDP the averaged gradient comes back in half, and the reference does so too).
      EXPECT_EQ(MaxRelativeDifference(
                    got, ReplayReference(*in_, opt, kWorkers, half, 1, strategy == "ddp")),
                0)
          << name << " " << strategy;
      // For information: against fp32 training, the half rounding shows.
      std::printf("%s %s: max relative difference to fp32 training %.3g\n", name.c_str(),
                  strategy.c_str(), MaxRelativeDifference(got, fp32));
    }
  }
  CommandResult r = Replay(*dir_ + "/never.npy", {"--precision=fp8"});
  EXPECT_NE(r.output.find("--precision must be fp32, fp16 or bf16"), std::string::npos);
}

TEST_F(ReplayEquivalenceTest, ShuffledArrivalOrderIsBitwiseIdentical) {
  const std::vector<std::string> adam = {"--optimizer=adam", "--lr=0.01"};
  std::vector<float> base = ReplayOk("order0", adam);
  for (int seed : {11, 12}) {
    std::vector<std::string> flags = adam;
    flags.push_back(absl::StrCat("--shuffle_seed=", seed));
    std::vector<float> shuffled = ReplayOk(absl::StrCat("order", seed), flags);
    ASSERT_EQ(shuffled.size(), base.size());
    EXPECT_EQ(0, std::memcmp(shuffled.data(), base.data(), base.size() * sizeof(float)))
        << "seed " << seed << " changed the bits";
  }
}

TEST_F(ReplayEquivalenceTest, RejectsBadInputBeforeStartingAnything) {
  const std::string out = *dir_ + "/never.npy";
  // A gradient file of the wrong dtype.
  const std::string bad_dir = *dir_ + "/bad";
  RunCommand("mkdir -p " + bad_dir + " && cp " + *dir_ + "/step*.npy " + bad_dir);
  FILE* f = std::fopen((bad_dir + "/step2_rank1.npy").c_str(), "wb");
  const char header[] =
      "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }";
  std::string h(header, sizeof(header) - 1);
  h.resize(10 + 0x76 - 1, ' ');
  h += '\n';
  std::fwrite(h.data(), 1, h.size(), f);
  double d[4] = {1, 2, 3, 4};
  std::fwrite(d, sizeof(d), 1, f);
  std::fclose(f);
  CommandResult r = RunCommand(absl::StrJoin(
      std::vector<std::string>{FindBinary("tools/tessel-replay"), "--init=" + *dir_ + "/init.npy",
                               "--grads=" + bad_dir, absl::StrCat("--steps=", kSteps),
                               "--workers=3", "--out=" + out},
      " "));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("step2_rank1.npy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<f8"), std::string::npos) << r.output;
  // Missing rank file, unknown optimizer, unknown strategy.
  r = Replay(out, {"--workers=4"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank3"), std::string::npos) << r.output;
  r = Replay(out, {"--optimizer=lion"});
  EXPECT_NE(r.output.find("--optimizer must be sgd, adam, adamw, rmsprop or adagrad"),
            std::string::npos);
  r = Replay(out, {"--strategy=zero9"});
  EXPECT_NE(r.output.find("unknown strategy"), std::string::npos);
  EXPECT_NE(access(out.c_str(), F_OK), 0) << "no output may be written on bad input";
}

// --- hybrid DPxTPxPP replay -------------------------------------------------
//
// tessel-replay --strategy=hybrid: the flat vector is the parameter vector of
// the MLP 16,32,32,4 (1732 floats); every process steps its partition's slice
// of its replica's files. Optimizers are elementwise, so the reassembled
// result must equal single-process training on the same files bit for bit
// (tolerance 0), and the flat replay through a plain cluster as well.

constexpr char kHybridLayers[] = "16,32,32,4";
constexpr size_t kHybridParams = 16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4;
constexpr int kHybridSteps = 4;
constexpr int kHybridReplicas = 2;
constexpr int kHybridMicro = 2;

class HybridReplayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    in_ = new ReplayInputs(MakeReplayInputs("hybrid-replay-test", kHybridParams, kHybridSteps,
                                            kHybridReplicas, 9, kHybridMicro));
  }

  static CommandResult Run(const std::string& out, const std::vector<std::string>& flags) {
    std::vector<std::string> cmd = {FindBinary("tools/tessel-replay"),
                                    "--strategy=hybrid",
                                    absl::StrCat("--layers=", kHybridLayers),
                                    "--init=" + in_->dir + "/init.npy",
                                    "--grads=" + in_->dir,
                                    absl::StrCat("--steps=", kHybridSteps),
                                    "--servers=2",
                                    "--bucket_bytes=1024",
                                    "--timeout_s=120",
                                    "--out=" + out};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    return RunCommand(absl::StrJoin(cmd, " "));
  }

  // Runs the replay and asserts its result equals the reference bit for bit.
  static void ExpectBitwise(const std::string& name, const std::vector<std::string>& flags,
                            const std::vector<float>& want) {
    const std::string out = in_->dir + "/" + name + ".npy";
    const absl::Time start = absl::Now();
    CommandResult r = Run(out, flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto got = ReadNpyF32(out);
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << r.output;
    ASSERT_EQ(got->size(), want.size());
    EXPECT_EQ(0, std::memcmp(got->data(), want.data(), want.size() * sizeof(float)))
        << name << ": max relative difference " << MaxRelativeDifference(*got, want);
    std::printf("[hybrid replay] %s: %.2f s, max relative difference to the reference %.3g\n",
                name.c_str(), absl::ToDoubleSeconds(absl::Now() - start),
                MaxRelativeDifference(*got, want));
    std::fflush(stdout);
  }

  static ReplayInputs* in_;
};

ReplayInputs* HybridReplayTest::in_ = nullptr;

OptimizerParams AdamW() {
  OptimizerParams opt;
  opt.kind = OptimizerParams::Kind::kAdamW;
  opt.lr = 0.01f;
  opt.weight_decay = 0.1f;
  return opt;
}
const std::vector<std::string> kAdamWFlags = {"--optimizer=adamw", "--lr=0.01",
                                              "--weight_decay=0.1"};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(HybridReplayTest, DP2xTP2EqualsSingleProcessAndFlatReplayBitwise) {
  const std::vector<float> want = ReplayReference(*in_, AdamW(), kHybridReplicas);
  ExpectBitwise("dp2tp2_m1", With(kAdamWFlags, {"--dp=2", "--tp=2", "--pp=1"}), want);
  // The flat replay (2 workers, no split) on the same files gives the same bits.
  const std::string flat = in_->dir + "/flat.npy";
  CommandResult r = RunCommand(
      absl::StrJoin(With({FindBinary("tools/tessel-replay"), "--init=" + in_->dir + "/init.npy",
                          "--grads=" + in_->dir, absl::StrCat("--steps=", kHybridSteps),
                          "--workers=2", "--servers=2", "--out=" + flat},
                         kAdamWFlags),
                    " "));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto got = ReadNpyF32(flat);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(0, std::memcmp(got->data(), want.data(), want.size() * sizeof(float)));
  // Two micro-batches per replica: AccumulateGradients on each partition.
  ExpectBitwise("dp2tp2_m2", With(kAdamWFlags, {"--dp=2", "--tp=2", "--pp=1", "--micro_batches=2"}),
                ReplayReference(*in_, AdamW(), kHybridReplicas, std::nullopt, kHybridMicro));
}

TEST_F(HybridReplayTest, DP2xPP2EqualsSingleProcessBitwise) {
  OptimizerParams sgd;
  sgd.kind = OptimizerParams::Kind::kSgd;
  sgd.lr = 0.05f;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01f;
  const std::vector<std::string> flags = {
      "--optimizer=sgd",     "--lr=0.05", "--momentum=0.9", "--nesterov=true",
      "--weight_decay=0.01", "--dp=2",    "--tp=1",         "--pp=2"};
  ExpectBitwise("dp2pp2_m1", flags, ReplayReference(*in_, sgd, kHybridReplicas));
  ExpectBitwise("dp2pp2_m2_zero1", With(flags, {"--micro_batches=2", "--partition_strategy=zero1"}),
                ReplayReference(*in_, sgd, kHybridReplicas, std::nullopt, kHybridMicro));
}

TEST_F(HybridReplayTest, MixedPrecisionEqualsTheMixedPrecisionReferenceBitwise) {
  ExpectBitwise(
      "dp2tp2_m2_bf16",
      With(kAdamWFlags, {"--dp=2", "--tp=2", "--pp=1", "--micro_batches=2", "--precision=bf16"}),
      ReplayReference(*in_, AdamW(), kHybridReplicas, HalfType::kBF16, kHybridMicro));
}

TEST_F(HybridReplayTest, RejectsBadInputBeforeStartingAnything) {
  const std::string out = in_->dir + "/never.npy";
  // INIT does not match the MLP's parameter count.
  CommandResult r = Run(out, {"--dp=2", "--tp=2", "--layers=16,32,32,8"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("init.npy has 1732 floats but the MLP --layers=16,32,32,8 has"),
            std::string::npos)
      << r.output;
  // A micro-batch file missing: named, with what the run needs.
  RunCommand("mv " + in_->dir + "/step3_rank1_micro1.npy " + in_->dir + "/moved.npy");
  r = Run(out, {"--dp=2", "--tp=2", "--micro_batches=2"});
  RunCommand("mv " + in_->dir + "/moved.npy " + in_->dir + "/step3_rank1_micro1.npy");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("step3_rank1_micro1.npy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("_micro{m}.npy for m in [0, 2)"), std::string::npos) << r.output;
  // A replica the files do not have.
  r = Run(out, {"--dp=3"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("step0_rank2.npy"), std::string::npos) << r.output;
  // A configuration that cannot run: refused naming the flag.
  r = Run(out, {"--dp=2", "--tp=3"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tp=3 does not divide hidden size 32"), std::string::npos) << r.output;
  r = Run(out, {"--partition_strategy=ddp"});
  EXPECT_NE(r.output.find("zero1 or zero2"), std::string::npos) << r.output;
  EXPECT_NE(access(out.c_str(), F_OK), 0) << "no output may be written on bad input";
  EXPECT_EQ(r.output.find("shard servers +"), std::string::npos) << "nothing may start";
}

}  // namespace
}  // namespace tessel
