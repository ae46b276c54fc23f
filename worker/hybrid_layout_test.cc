// The hybrid layout (worker/hybrid_layout.h): configuration checks, the rank
// mapping, groups, tags and the 1F1B schedule. (Real processes:
// tests/hybrid_test.cc.)
#include "worker/hybrid_layout.h"

#include <set>
#include <string>
#include <vector>

#include "core/job_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

TEST(HybridConfigTest, RefusesBadConfigurationsNamingWhatToChange) {
  absl::Status s = ValidateHybridConfig({.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dp=2 x tp=2 x pp=2 = 8 processes"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("world size is 4"));

  s = ValidateHybridConfig({.dp = 2, .tp = 1, .pp = 1, .micro_batches = 0}, 2);
  EXPECT_THAT(std::string(s.message()), HasSubstr("micro_batches must be in [1, 4095], got 0"));
  s = ValidateHybridConfig({.dp = 0, .tp = 1, .pp = 1, .micro_batches = 1}, 0);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dp, tp and pp must each be >= 1"));
  EXPECT_TRUE(ValidateHybridConfig({.dp = 2, .tp = 2, .pp = 2, .micro_batches = 4}, 8).ok());
}

TEST(HybridConfigTest, RankMappingIsABijectionWithTensorRanksAdjacent) {
  const HybridConfig c{.dp = 3, .tp = 2, .pp = 4, .micro_batches = 1};
  std::set<std::tuple<int, int, int>> seen;
  for (int r = 0; r < c.world(); ++r) {
    const RankCoords x = CoordsOf(c, r);
    EXPECT_EQ(RankOf(c, x), r);
    EXPECT_TRUE(seen.insert({x.d, x.p, x.t}).second);
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(DescribeRank(c, 5), "rank 5 (d0 p2 t1)");
  EXPECT_EQ(TensorGroup(c, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(DataGroup(c, 5), (std::vector<int>{5, 13, 21}));
  EXPECT_EQ(NextStageRank(c, 5), 7);
  EXPECT_EQ(PrevStageRank(c, 5), 3);
  EXPECT_EQ(PrevStageRank(c, 1), -1);
  EXPECT_EQ(NextStageRank(c, 7), -1);
  EXPECT_EQ(PartitionJobName("mlp", 2, 1), "mlp.p2.t1");
  EXPECT_EQ(MeshGroupName("mlp"), "mlp.mesh");
}

TEST(HybridConfigTest, TagsAreDistinct) {
  std::set<uint64_t> tags;
  for (auto kind : {HybridMessage::kActivation, HybridMessage::kActivationGrad,
                    HybridMessage::kForwardSum, HybridMessage::kBackwardSum}) {
    for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{4000000000}}) {
      for (int micro : {0, 1, 4095}) {
        for (int index : {0, 1, 4095}) {
          EXPECT_TRUE(tags.insert(HybridTag(kind, step, micro, index)).second);
        }
      }
    }
  }
}

// Simulates the stages with unbounded buffers: every receive must find its
// message eventually (no deadlock), and per stage the forwards and backwards
// run in micro-batch order with at most stages - stage in flight.
TEST(OneFOneBTest, ScheduleIsCompleteOrderedBoundedAndDeadlockFree) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int micro = 1; micro <= 9; ++micro) {
      std::vector<std::vector<PipelineOp>> ops(stages);
      for (int p = 0; p < stages; ++p) {
        ops[p] = OneFOneBSchedule(p, stages, micro);
        ASSERT_EQ(ops[p].size(), 2u * micro);
        int f = 0, b = 0, in_flight = 0, peak = 0;
        for (const PipelineOp& op : ops[p]) {
          if (op.forward) {
            EXPECT_EQ(op.micro_batch, f++);
            peak = std::max(peak, ++in_flight);
          } else {
            EXPECT_EQ(op.micro_batch, b++);
            EXPECT_LT(op.micro_batch, f) << "backward before its forward";
            --in_flight;
          }
        }
        EXPECT_LE(peak, std::min(stages - p, micro));
      }
      // Forward j on stage p needs forward j of p-1; backward j on p needs
      // backward j of p+1 (and, on the last stage, its own forward).
      std::vector<size_t> pc(stages, 0);
      std::vector<int> fwd_done(stages, 0), bwd_done(stages, 0);
      bool progress = true;
      while (progress) {
        progress = false;
        for (int p = 0; p < stages; ++p) {
          if (pc[p] == ops[p].size()) continue;
          const PipelineOp& op = ops[p][pc[p]];
          const bool ready = op.forward ? (p == 0 || fwd_done[p - 1] > op.micro_batch)
                                        : (p == stages - 1 || bwd_done[p + 1] > op.micro_batch);
          if (!ready) continue;
          (op.forward ? fwd_done : bwd_done)[p]++;
          ++pc[p];
          progress = true;
        }
      }
      for (int p = 0; p < stages; ++p) {
        EXPECT_EQ(pc[p], ops[p].size()) << "deadlock: stages " << stages << " micro " << micro;
      }
    }
  }
  EXPECT_EQ(OneFOneBSchedule(0, 2, 3),
            (std::vector<PipelineOp>{
                {true, 0}, {true, 1}, {false, 0}, {true, 2}, {false, 1}, {false, 2}}));
}

}  // namespace
}  // namespace tessel
