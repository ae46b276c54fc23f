// StateTransfer: when ReadState may run, what WriteState's chunks and commit
// do, and which refusals drop the staging (tested without a ShardJob).
#include "server/state_transfer.h"

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/limits.h"

namespace tessel {
namespace {

constexpr int64_t kElements = 10;
constexpr int kSlots = 2;
constexpr int kTensors = 3;

// The bytes of floats base, base + 1, ... (n of them).
std::string Floats(int64_t n, float base) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), base);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

StateTransfer Zero() {
  return StateTransfer("job 'j' shard 0: ", kElements, kSlots, kTensors, true);
}

StateTransfer::Shard Idle(int64_t version = 5) {
  return {.epoch = 2, .version = version, .initialized = true};
}

// A chunk of params and state at `offset`.
StateWrite Chunk(int64_t step, int64_t offset, int64_t n, bool commit = false) {
  static std::vector<std::string> keep;  // the views point into these
  keep.push_back(Floats(n, 100.f + static_cast<float>(offset)));
  keep.push_back(Floats(kSlots * n, 200.f + static_cast<float>(offset)));
  StateWrite w;
  w.step = step;
  w.offset = offset;
  w.params = keep[keep.size() - 2];
  w.state = keep.back();
  w.commit = commit;
  return w;
}

StateWrite Commit(int64_t step) {
  StateWrite w;
  w.step = step;
  w.commit = true;
  return w;
}

TEST(StateTransferTest, ReadsInsideTheRangeBetweenSteps) {
  StateTransfer t = Zero();
  EXPECT_TRUE(t.CheckRange(0, kElements).ok());
  EXPECT_TRUE(t.CheckRange(kElements, 0).ok());
  for (auto [offset, count] : {std::pair<int64_t, int64_t>{-1, 1}, {0, -1}, {5, 6}, {11, 0}}) {
    EXPECT_EQ(t.CheckRange(offset, count).code(), absl::StatusCode::kInvalidArgument)
        << offset << " +" << count;
  }
  StateTransfer big("", kMaxStateElementsPerCall + 1, kSlots, kTensors, true);
  EXPECT_EQ(big.CheckRange(0, kMaxStateElementsPerCall + 1).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(t.CheckRead(Idle(), 5, 0).ok());
  EXPECT_TRUE(t.CheckRead(Idle(), 5, 2).ok());
  EXPECT_EQ(t.CheckRead(Idle(), 5, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.CheckRead(Idle(), 4, 0).code(), absl::StatusCode::kFailedPrecondition);
  StateTransfer::Shard busy = Idle();
  busy.step_in_progress = true;
  const absl::Status s = t.CheckRead(busy, 5, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("next step in progress"), std::string::npos) << s;
  StateTransfer::Shard fresh = Idle();
  fresh.initialized = false;
  EXPECT_EQ(t.CheckRead(fresh, 5, 0).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StateTransferTest, DdpReadsNothingAndWritesOnlyTheCommit) {
  StateTransfer ddp("", kElements, 0, kTensors, /*holds_params=*/false);
  EXPECT_EQ(ddp.CheckRange(0, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ddp.Write(Idle(), Chunk(7, 0, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<bool> commit = ddp.Write(Idle(), Commit(7));
  ASSERT_TRUE(commit.ok()) << commit.status();
  EXPECT_TRUE(*commit);
}

TEST(StateTransferTest, ChunksStageAndTheCommitNeedsEveryElement) {
  StateTransfer t = Zero();
  absl::StatusOr<bool> w = t.Write(Idle(), Chunk(7, 0, 6));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(*w);
  EXPECT_EQ(t.staged(), 6);
  // Not all there: refused, and the staging is gone.
  EXPECT_EQ(t.Write(Idle(), Commit(7)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.staged(), 0);

  ASSERT_TRUE(t.Write(Idle(), Chunk(7, 0, 6)).ok());
  w = t.Write(Idle(), Chunk(7, 6, 4, /*commit=*/true));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(*w);
  std::vector<float> values(kElements);
  std::vector<std::vector<float>> state(kSlots, std::vector<float>(kElements));
  t.CopyTo(absl::MakeSpan(values), state);
  EXPECT_EQ(values[0], 100.f);
  EXPECT_EQ(values[6], 106.f);                // base 100 + offset 6 + index 0
  EXPECT_EQ(state[1][9], 200.f + 6 + 4 + 3);  // slot 1 follows slot 0's four
}

TEST(StateTransferTest, RefusalsDropTheStaging) {
  StateTransfer t = Zero();
  ASSERT_TRUE(t.Write(Idle(), Chunk(7, 0, kElements)).ok());
  StateWrite zombie = Commit(7);
  zombie.epoch = 1;  // a writer from before a recovery
  EXPECT_EQ(t.Write(Idle(), zombie).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.staged(), 0);

  ASSERT_TRUE(t.Write(Idle(), Chunk(7, 0, kElements)).ok());
  StateTransfer::Shard busy = Idle();
  busy.pulls_waiting = true;
  EXPECT_EQ(t.Write(busy, Commit(7)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.staged(), 0);

  ASSERT_TRUE(t.Write(Idle(), Chunk(7, 0, kElements)).ok());
  StateWrite bad_skips = Commit(7);
  bad_skips.tensor_skips = {1, 2};  // one entry per tensor is needed
  EXPECT_EQ(t.Write(Idle(), bad_skips).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.staged(), 0);

  StateWrite misfit = Chunk(7, 8, 4);  // past the range
  EXPECT_EQ(t.Write(Idle(), misfit).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.staged(), 0);
  EXPECT_EQ(t.Write(Idle(), Commit(-1)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel
