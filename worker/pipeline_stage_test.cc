// PipelineStage with ranks as threads over the in-process transport: values
// and gradients flow through the stages in 1F1B order with backwards in
// micro-batch order, tensor-parallel sums give every member the same bits,
// and a wrong size or a missing peer fails naming what and whom.
#include "worker/pipeline_stage.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/inproc_mesh.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

// Stage p multiplies by (p + 2), summed over its tp ranks with weights
// (t + 1) / (1 + ... + tp) = 1 when tp = 1; the loss is 0.5 * |out|^2, so
// d(loss)/d(out) = out, and each backward multiplies by the same factor.
struct ScalingRun {
  std::vector<absl::Status> status;
  std::vector<std::vector<int>> backward_order;             // per rank
  std::vector<std::vector<std::vector<float>>> grads_at_0;  // stage-0 ranks: per micro-batch
  std::vector<std::vector<float>> sums;                     // per rank: its last sum
};

ScalingRun RunScaling(const HybridConfig& c) {
  auto peers = InProcMesh(c, absl::Seconds(30));
  ScalingRun run;
  run.status.resize(c.world());
  run.backward_order.resize(c.world());
  run.grads_at_0.assign(c.world(), std::vector<std::vector<float>>(c.micro_batches));
  run.sums.resize(c.world());
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world(); ++r) {
    threads.emplace_back([&, r] {
      PipelineStage stage(peers[r].get(), c, r);
      const float factor = static_cast<float>(stage.coords().p + 2);
      StageFunctions f;
      f.input_size = f.output_size = 2;
      f.forward = [&](int j, std::vector<float> in) -> absl::StatusOr<std::vector<float>> {
        if (stage.first_stage()) in = {j + 1.0f, j + 2.0f};
        for (float& v : in) v *= factor;
        TESSEL_RETURN_IF_ERROR(stage.SumOverTensorGroup(TensorSum::kForward, 5, j, 0,
                                                        absl::MakeSpan(in), "the test's output"));
        for (float& v : in) v /= static_cast<float>(c.tp);
        run.sums[r] = in;
        return in;  // last stage: d(0.5 |out|^2)/d(out) = out
      };
      f.backward = [&](int j, std::vector<float> d) -> absl::StatusOr<std::vector<float>> {
        run.backward_order[r].push_back(j);
        if (stage.first_stage()) {
          run.grads_at_0[r][j] = d;
          return std::vector<float>();
        }
        for (float& v : d) v *= factor;
        return d;
      };
      run.status[r] = stage.Step(5, f);
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

TEST(PipelineStageTest, ThreeStagesCarryValuesForwardAndGradientsBack) {
  const HybridConfig c{1, 1, 3, 4};
  const ScalingRun run = RunScaling(c);
  for (int r = 0; r < c.world(); ++r) {
    ASSERT_TRUE(run.status[r].ok()) << run.status[r];
    EXPECT_EQ(run.backward_order[r], (std::vector<int>{0, 1, 2, 3}));
  }
  // out = 24 x; back through stages 2 and 1: 24 * 4 * 3 = 288 x.
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(run.grads_at_0[0][j], (std::vector<float>{288.0f * (j + 1), 288.0f * (j + 2)}));
  }
}

TEST(PipelineStageTest, TensorSumsGiveEveryMemberTheSameBits) {
  const HybridConfig c{2, 2, 2, 3};
  const ScalingRun run = RunScaling(c);
  for (int r = 0; r < c.world(); ++r) ASSERT_TRUE(run.status[r].ok()) << run.status[r];
  for (int d = 0; d < 2; ++d) {
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(run.sums[RankOf(c, {d, p, 0})], run.sums[RankOf(c, {d, p, 1})]);
    }
    // Two ranks' equal shares summed and divided by 2: as with tp = 1,
    // out = 6 x and 18 x back at stage 0.
    EXPECT_EQ(run.grads_at_0[RankOf(c, {d, 0, 1})][2], (std::vector<float>{54.0f, 72.0f}));
  }
}

TEST(PipelineStageTest, AWrongSizeIsRefusedNamingIt) {
  const HybridConfig c{1, 1, 2, 1};
  auto peers = InProcMesh(c, absl::Milliseconds(300));
  PipelineStage stage(peers[0].get(), c, 0);
  StageFunctions f;
  f.output_size = 3;
  f.forward = [](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
    return std::vector<float>(2);
  };
  f.backward = [](int, std::vector<float> d) -> absl::StatusOr<std::vector<float>> { return d; };
  const absl::Status s = stage.Step(0, f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("rank 0 (d0 p0 t0): forward (the activation, output_size) of step 0 "
                        "micro-batch 0 returned 2 floats, expected 3"));
  EXPECT_FALSE(stage.SumOverTensorGroup(TensorSum::kBackward, 0, 0, 4096, {}, "x").ok());
}

TEST(PipelineStageTest, AMissingPeerFailsTheWaitNamingStepMicroBatchAndPeer) {
  const HybridConfig c{1, 1, 2, 2};
  auto peers = InProcMesh(c, absl::Milliseconds(300));
  PipelineStage stage(peers[0].get(), c, 0);  // stage 1 never runs
  StageFunctions f;
  f.forward = [](int, std::vector<float>) -> absl::StatusOr<std::vector<float>> {
    return std::vector<float>(2);
  };
  f.backward = [](int, std::vector<float> d) -> absl::StatusOr<std::vector<float>> { return d; };
  const absl::Status s = stage.Step(7, f);
  ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the gradient of step 7 micro-batch 0's activation from stage 1"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("from rank 1 (d0 p1 t0)"));
}

}  // namespace
}  // namespace tessel
