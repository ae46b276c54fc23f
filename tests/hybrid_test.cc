// Hybrid data x tensor x pipeline parallelism, end to end.
//
// In-process (threads over the in-process transport, no servers): one step of
// every rank's 1F1B stage equals the single-process split arithmetic bit for
// bit, and a missing peer makes a wait fail at its deadline naming the peer,
// stage and micro-batch.
//
// Real processes (a LocalCluster with 2 shard server processes, and
// dp*tp*pp tessel-hybrid-train processes talking over UCX): the reassembled
// final parameters equal the single-process hybrid reference bitwise
// (the contract says 1e-6 relative), for DP1xTP1xPP1, DP2xTP2, DP2xPP2,
// TP2xPP2 and DP2xTP2xPP2 in fp32, and DP2xTP2 fp16, DP2xPP2 bf16 and
// TP2xPP2 bf16 (zero1) in mixed precision; the difference from the unsplit
// MLP is printed.
// Bad configurations are refused before anything starts, naming what to
// change.
#include "worker/hybrid.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/npy.h"
#include "core/precision.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/split_mlp.h"
#include "rpc/registry_client.h"
#include "testing/inproc_mesh.h"
#include "testing/local_cluster.h"
#include "testing/process.h"
#include "tools/internal/hybrid_launch.h"
#include "tools/internal/hybrid_mlp.h"
#include "tools/internal/mlp_job.h"
#include "worker/peer_group.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

MlpJobConfig SmallMlp() {
  MlpJobConfig c;
  c.layers = {16, 32, 32, 4};
  c.batch = 12;
  c.samples = 512;
  return c;
}

std::string Name(const HybridConfig& c) {
  return absl::StrCat("DP", c.dp, "xTP", c.tp, "xPP", c.pp, "_M", c.micro_batches);
}

// --- in-process -------------------------------------------------------------

// All ranks of `config` as threads, each with a PeerGroup over the
// in-process transport.

class HybridStageTest : public ::testing::TestWithParam<HybridConfig> {};

TEST_P(HybridStageTest, OneStepOfEveryRankEqualsTheSplitArithmeticBitwise) {
  const HybridConfig config = GetParam();
  const MlpJob job(SmallMlp());
  auto split = ValidateHybrid(config, config.world(), job.config());
  ASSERT_TRUE(split.ok()) << split.status();
  std::vector<float> full(job.model().num_params());
  job.Init(full.data());

  auto peers = InProcMesh(config, absl::Seconds(30));
  const int64_t step = 3;
  std::vector<std::vector<float>> grads(config.world());
  std::vector<absl::Status> status(config.world());
  std::vector<float> loss(config.world());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ready(config.world());
  std::vector<std::thread> threads;
  for (int r = 0; r < config.world(); ++r) {
    threads.emplace_back([&, r] {
      const RankCoords me = CoordsOf(config, r);
      const std::vector<float> params = split->Slice(full, me.p, me.t);
      grads[r].assign(params.size(), -1.0f);
      model::Dataset b = job.Batch(step, me.d, config.dp);
      HybridMlpStage stage(*split, config, r, peers[r].get());
      auto l = stage.Step(step, params, b.x.data(), b.y.data(), job.config().batch,
                          absl::MakeSpan(grads[r]), [&, r](int64_t begin, int64_t end) {
                            ready[r].push_back({begin, end});
                            return absl::OkStatus();
                          });
      status[r] = l.status();
      if (l.ok()) loss[r] = *l;
    });
  }
  for (auto& t : threads) t.join();

  for (int d = 0; d < config.dp; ++d) {
    std::vector<std::vector<float>> parts;
    for (int p = 0; p < config.pp; ++p) {
      for (int t = 0; t < config.tp; ++t) parts.push_back(split->Slice(full, p, t));
    }
    model::Dataset b = job.Batch(step, d, config.dp);
    std::vector<std::vector<float>> want;
    const float want_loss = split->ReferenceGradients(
        parts, b.x.data(), b.y.data(), job.config().batch, config.micro_batches, &want);
    for (int p = 0; p < config.pp; ++p) {
      for (int t = 0; t < config.tp; ++t) {
        const int r = RankOf(config, {d, p, t});
        ASSERT_TRUE(status[r].ok()) << DescribeRank(config, r) << ": " << status[r];
        ASSERT_EQ(grads[r].size(), want[p * config.tp + t].size());
        EXPECT_EQ(0, std::memcmp(grads[r].data(), want[p * config.tp + t].data(),
                                 grads[r].size() * sizeof(float)))
            << DescribeRank(config, r) << " gradients differ from the reference";
        // Every tensor handed over exactly once, covering the partition.
        int64_t covered = 0;
        for (auto [begin, end] : ready[r]) covered += end - begin;
        EXPECT_EQ(covered, static_cast<int64_t>(grads[r].size()));
        if (p == config.pp - 1) {
          EXPECT_EQ(loss[r], want_loss) << DescribeRank(config, r);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, HybridStageTest,
                         ::testing::Values(HybridConfig{1, 2, 2, 4}, HybridConfig{2, 2, 1, 2},
                                           HybridConfig{1, 1, 3, 6}, HybridConfig{1, 4, 2, 1},
                                           HybridConfig{2, 2, 2, 3}),
                         [](const ::testing::TestParamInfo<HybridConfig>& info) {
                           return Name(info.param);
                         });

TEST(HybridStageDeadlineTest, AMissingStageFailsTheWaitNamingPeerStageAndMicroBatch) {
  const HybridConfig config{1, 1, 2, 2};
  const MlpJob job(SmallMlp());
  auto split = ValidateHybrid(config, config.world(), job.config());
  ASSERT_TRUE(split.ok());
  std::vector<float> full(job.model().num_params());
  job.Init(full.data());
  auto peers = InProcMesh(config, absl::Milliseconds(300));
  // Stage 0 alone: its activations go out, no gradient ever comes back.
  std::vector<float> params = split->Slice(full, 0, 0);
  std::vector<float> grads(params.size());
  model::Dataset b = job.Batch(0, 0, 1);
  HybridMlpStage stage(*split, config, 0, peers[0].get());
  const absl::Time start = absl::Now();
  auto loss = stage.Step(0, params, b.x.data(), b.y.data(), job.config().batch,
                         absl::MakeSpan(grads), [](int64_t, int64_t) { return absl::OkStatus(); });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(loss.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string msg(loss.status().message());
  EXPECT_THAT(msg, HasSubstr("the gradient of step 0 micro-batch 0's activation from stage 1"));
  EXPECT_THAT(msg, HasSubstr("from rank 1 (d0 p1 t0)"));
  EXPECT_THAT(msg, HasSubstr("rank 0 (d0 p0 t0)"));
}

// --- real processes ---------------------------------------------------------

struct RunCase {
  HybridConfig config;
  std::string optimizer;           // "adam" (lr 1e-3) or "sgd" (the flags in extra)
  std::vector<std::string> extra;  // more flags for every process
  std::string precision = "fp32";  // --precision
};

RunCase Adam(const HybridConfig& config, const std::string& precision = "fp32") {
  return RunCase{config, "adam", {}, precision};
}

class HybridClusterTest : public ::testing::TestWithParam<RunCase> {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.servers = 2;
    o.run_dir = MakeRunDir("hybrid-test");
    cluster_ = new LocalCluster(o);
    const absl::Status s = cluster_->Start();
    ASSERT_TRUE(s.ok()) << s;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static LocalCluster* cluster_;
};
LocalCluster* HybridClusterTest::cluster_ = nullptr;

constexpr int kSteps = 5;

TEST_P(HybridClusterTest, FinalParametersEqualTheSingleProcessReference) {
  ASSERT_NE(cluster_, nullptr);
  const RunCase& rc = GetParam();
  const MlpJobConfig mlp = SmallMlp();
  HybridLaunchOptions o;
  o.config = rc.config;
  o.servers = 2;
  o.job = absl::StrCat("h-", Name(rc.config), "-", rc.optimizer, "-", rc.precision);
  o.args = {"--layers=16,32,32,4",
            absl::StrCat("--batch=", mlp.batch),
            absl::StrCat("--samples=", mlp.samples),
            absl::StrCat("--steps=", kSteps),
            absl::StrCat("--optimizer=", rc.optimizer),
            "--step_timeout_s=30",
            "--connect_timeout_s=30",
            "--log_every=100",
            absl::StrCat("--precision=", rc.precision)};
  o.args.insert(o.args.end(), rc.extra.begin(), rc.extra.end());
  o.out = absl::StrCat(cluster_->run_dir(), "/", o.job, ".npy");
  o.timeout = absl::Seconds(60);
  o.show_rank0 = false;
  const absl::Time start = absl::Now();
  const absl::Status s = RunHybridWorkers(cluster_, FindBinary("tools/tessel-hybrid-train"), o);
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(s.ok()) << s;
  auto final_params = ReadNpyF32(o.out);
  ASSERT_TRUE(final_params.ok()) << final_params.status();

  OptimizerParams opt;
  if (rc.optimizer == "sgd") {
    opt.kind = OptimizerParams::Kind::kSgd;
    opt.lr = 0.05f;
    opt.momentum = 0.9f;
    opt.nesterov = true;
  } else {
    opt.kind = OptimizerParams::Kind::kAdam;
    opt.lr = 1e-3f;
  }
  std::optional<HalfType> half;
  if (rc.precision == "fp16") half = HalfType::kF16;
  if (rc.precision == "bf16") half = HalfType::kBF16;
  const MlpJob job(mlp);
  auto diffs = CompareWithReferences(job, opt, rc.config, kSteps, *final_params, half);
  ASSERT_TRUE(diffs.ok()) << diffs.status();
  std::vector<float> init(job.model().num_params());
  job.Init(init.data());
  std::printf(
      "[hybrid] %s %s %s: %d processes in %.2f s; max relative difference vs hybrid "
      "reference %.3g; vs unsplit MLP: max relative %.3g (same micro-batches) / %.3g "
      "(whole batches), normwise %.3g / %.3g\n",
      Name(rc.config).c_str(), rc.optimizer.c_str(), rc.precision.c_str(), rc.config.world(), secs,
      diffs->hybrid, diffs->unsplit_same_micro_batches, diffs->unsplit_whole_batch,
      diffs->unsplit_same_micro_batches_norm, diffs->unsplit_whole_batch_norm);
  std::fflush(stdout);
  // The contract is 1e-6 relative; every sum runs in a fixed order, so the
  // run is in fact bitwise equal to its reference (fp32 and mixed precision).
  EXPECT_EQ(diffs->hybrid, 0.0);
  EXPECT_GT(NormRelativeDifference(*final_params, init), 1e-3) << "nothing was trained";
  if (rc.config.tp == 1) {
    // Without a tensor split the arithmetic is the unsplit MLP's: bitwise
    // equal to the existing data-parallel reference with the same precision
    // (an independent check).
    EXPECT_EQ(diffs->unsplit_same_micro_batches, 0.0);
  } else if (!half) {
    EXPECT_LE(diffs->unsplit_same_micro_batches, 1e-4);  // rounding only
  } else {
    // The split sums' last-bit differences can flip a half rounding: an
    // element then differs by one half ulp; as a whole the runs stay close.
    EXPECT_LE(diffs->unsplit_same_micro_batches_norm, 1e-2);
  }
  if (half) {
    // Half parameters: every final value is representable in the half type.
    std::vector<float> rounded = *final_params;
    RoundTrip(half, rounded.data(), rounded.size());
    EXPECT_EQ(0, std::memcmp(rounded.data(), final_params->data(), rounded.size() * sizeof(float)));
    // And the half arithmetic shows: the fp32 reference is a different result.
    auto fp32 = TrainHybridReference(job, opt, rc.config, kSteps);
    ASSERT_TRUE(fp32.ok()) << fp32.status();
    EXPECT_GT(MaxRelativeDifference(*final_params, *fp32), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, HybridClusterTest,
    ::testing::Values(Adam({1, 1, 1, 1}), Adam({2, 2, 1, 4}), Adam({2, 1, 2, 4}),
                      Adam({1, 2, 2, 4}), Adam({2, 2, 2, 4}),
                      RunCase{{2, 2, 2, 2},
                              "sgd",
                              {"--lr=0.05", "--momentum=0.9", "--nesterov=true", "--strategy=zero1",
                               // gradient queries in between change nothing
                               "--sync_grads_every=2"}},
                      // Mixed precision: half params/grads per partition.
                      RunCase{{2, 2, 1, 2}, "adam", {"--sync_grads_every=1"}, "fp16"},
                      Adam({2, 1, 2, 4}, "bf16"),
                      RunCase{{1, 2, 2, 2}, "adam", {"--strategy=zero1"}, "bf16"}),
    [](const ::testing::TestParamInfo<RunCase>& info) {
      return absl::StrCat(
          Name(info.param.config), "_", info.param.optimizer,
          info.param.precision == "fp32" ? std::string() : "_" + info.param.precision);
    });

// A process of a job, started alone (no cluster needed for refusals).
absl::Status RunAlone(const std::string& name, std::vector<std::string> args,
                      std::string* log_tail) {
  static const std::string dir = MakeRunDir("hybrid-refusals");
  ProcessGroup group(dir);
  std::vector<std::string> argv = {FindBinary("tools/tessel-hybrid-train"),
                                   "--registry=127.0.0.1:1"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::Status s = group.Start(name, argv);
  if (s.ok()) s = group.WaitAll({name}, absl::Seconds(30));
  *log_tail = group.LogTail(name, 5);
  return s;
}

TEST(HybridRefusalTest, BadConfigurationsAreRefusedNamingWhatToChange) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Bad> cases = {
      {{"--dp=2", "--tp=2", "--pp=1", "--world=3"},
       "dp=2 x tp=2 x pp=1 = 4 processes, but the world size is 3"},
      {{"--tp=3", "--world=3", "--layers=16,32,32,4"},
       "tp=3 does not divide hidden size 32 (output of fc0"},
      {{"--pp=4", "--world=4", "--layers=16,32,32,4"},
       "pp=4 pipeline stages but the MLP 16,32,32,4 has only 3 layer(s)"},
      {{"--micro_batches=0"}, "micro_batches must be in [1, 4095], got 0"},
      {{"--micro_batches=3", "--batch=8"}, "--batch=8 is not divisible by --micro_batches=3"},
      {{"--strategy=ddp"}, "zero1 or zero2"},
      {{"--precision=fp8"}, "--precision must be fp32, fp16 or bf16"},
      {{"--grads=/nonexistent"}, "replay mode (--grads) needs --init=INIT.npy"},
      {{"--grads=/nonexistent", "--init=/nonexistent/init.npy"},
       "cannot read .npy file /nonexistent/init.npy"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string tail;
    const absl::Status s = RunAlone(absl::StrCat("bad", i), cases[i].args, &tail);
    EXPECT_FALSE(s.ok()) << cases[i].message;
    EXPECT_THAT(std::string(s.message()), HasSubstr("exited with status 2"));
    EXPECT_THAT(tail, HasSubstr(cases[i].message));
  }
}

// Refusals at the mesh, before any partition job exists (one shard server:
// the mesh asks shard 0 for its key before it is joined).
TEST(HybridMeshTest, ProcessesThatDisagreeOrAreMissingAreNamed) {
  ClusterOptions co;
  co.servers = 1;
  co.run_dir = MakeRunDir("hybrid-mesh");
  LocalCluster cluster(co);
  ASSERT_TRUE(cluster.Start().ok());
  const std::string binary = FindBinary("tools/tessel-hybrid-train");
  auto argv = [&](const std::string& job, int rank, int world, const std::string& layers) {
    return std::vector<std::string>{binary,
                                    absl::StrCat("--registry=", cluster.registry_address()),
                                    absl::StrCat("--job=", job),
                                    absl::StrCat("--rank=", rank),
                                    absl::StrCat("--world=", world),
                                    absl::StrCat("--dp=", world),
                                    "--connect_timeout_s=3",
                                    "--step_timeout_s=5",
                                    "--samples=512",
                                    "--batch=8",
                                    "--steps=2",
                                    absl::StrCat("--layers=", layers),
                                    "--ucx_tls=posix,sysv,self",
                                    cluster.WorkerCredentialFlags()[0]};
  };
  ProcessGroup& group = cluster.processes();
  // Two processes of one job with different models: refused at start-up.
  ASSERT_TRUE(group.Start("disagree0", argv("h-disagree", 0, 2, "16,32,32,4")).ok());
  ASSERT_TRUE(group.Start("disagree1", argv("h-disagree", 1, 2, "16,32,4")).ok());
  absl::Status s = group.WaitAll({"disagree0", "disagree1"}, absl::Seconds(30));
  EXPECT_FALSE(s.ok());
  absl::SleepFor(absl::Milliseconds(500));  // let the other one finish too
  const std::string both = group.LogTail("disagree0", 5) + group.LogTail("disagree1", 5);
  EXPECT_THAT(both, HasSubstr("start every process with the same flags"));
  EXPECT_THAT(both, HasSubstr("layers=16,32,4"));

  // World of 2, only rank 0 started: the wait names the missing rank.
  ProcessGroup alone(co.run_dir);
  ASSERT_TRUE(alone.Start("alone0", argv("h-alone", 0, 2, "16,32,32,4")).ok());
  s = alone.WaitAll({"alone0"}, absl::Seconds(30));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(alone.LogTail("alone0", 5), HasSubstr("missing rank(s) {1}"));
}

// kill -9 of one process mid-training, nobody replacing it: its peer pauses
// within a few seconds (its lease lapses, the mesh epoch moves), naming it,
// and gives up after --recovery_timeout_s, long before the 60 s step
// deadline.
TEST(HybridMeshTest, AKilledPeerEndsItsPeersWaitNamingIt) {
  ClusterOptions co;
  co.servers = 1;
  co.run_dir = MakeRunDir("hybrid-kill");
  LocalCluster cluster(co);
  ASSERT_TRUE(cluster.Start().ok());
  ProcessGroup group(co.run_dir);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        group
            .Start(absl::StrCat("r", r),
                   {FindBinary("tools/tessel-hybrid-train"),
                    absl::StrCat("--registry=", cluster.registry_address()), "--job=h-kill",
                    absl::StrCat("--rank=", r), "--world=2", "--tp=2", "--servers=1",
                    "--steps=100000000", "--step_timeout_s=60", "--connect_timeout_s=30",
                    "--layers=16,32,32,4", "--batch=12", "--samples=512", "--log_every=100000000",
                    "--ucx_tls=posix,sysv,self", cluster.WorkerCredentialFlags()[0],
                    // Nobody replaces it: give up soon after pausing.
                    "--recovery_timeout_s=5"})
            .ok());
  }
  RegistryClient registry(cluster.registry_address(), {}, cluster.WorkerToken());
  pid_t victim = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (victim == 0 && absl::Now() < give_up) {
    auto view = registry.GetView("h-kill.mesh");
    if (view.ok() && view->members_size() == 2) {
      for (const auto& m : view->members()) {
        if (m.rank() == 1) victim = static_cast<pid_t>(m.pid());
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GT(victim, 0) << "the mesh never formed";
  absl::SleepFor(absl::Seconds(1));  // training is under way
  ASSERT_TRUE(group.CheckAlive().ok());
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  absl::Status s = group.WaitAll({"r0"}, absl::Seconds(45));  // reports r1's death first
  EXPECT_THAT(std::string(s.message()), HasSubstr("signal 9"));
  s = group.WaitAll({"r0"}, absl::Seconds(45));
  const double secs = absl::ToDoubleSeconds(absl::Now() - killed);
  EXPECT_FALSE(s.ok());
  EXPECT_LT(secs, 20) << "the peer's death was found by the deadline, not the membership";
  const std::string tail = group.LogTail("r0", 5);
  EXPECT_THAT(tail, HasSubstr("rank 1 (d0 p0 t1) left the mesh or stopped heartbeating")) << tail;
  EXPECT_THAT(tail, HasSubstr("did not return within 5s")) << tail;
  std::printf("[hybrid] kill -9 of rank 1: rank 0 stopped %.1f s later: %s\n", secs, tail.c_str());
}

}  // namespace
}  // namespace tessel
