// Hierarchical aggregation on a shard (JobSpec.rank_groups): one push per
// group and bucket, from any rank of the group, carrying the group's sum in
// rank order; the shard sums the groups in order and divides by the world
// size. The result is bitwise the tree "ranks of a group in order, then
// groups in order" computed with core/reduce.h, prefix order included; a
// second push of a group, bad groupings and top-k with groups are refused.
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "core/optimizer.h"
#include "core/reduce.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "rpc/job_spec.h"
#include "server/shard_job.h"
#include "server/shard_job_testing.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 3;

v1::JobSpec Spec(v1::Strategy strategy, const std::vector<int>& groups, int64_t elements,
                 int64_t bucket_floats) {
  v1::JobSpec spec =
      OneTensorSpec("groups", strategy, static_cast<int>(groups.size()), elements, bucket_floats);
  for (int g : groups) spec.add_rank_groups(g);
  return spec;
}

// Each group's partial sum over [begin, end) at `step`: its ranks' gradients
// summed left to right (ReduceSum), as the host's workers would.
std::vector<std::vector<float>> Partials(const std::vector<int>& groups, int64_t begin, int64_t end,
                                         int step) {
  const int world = static_cast<int>(groups.size());
  const size_t n = static_cast<size_t>(end - begin);
  std::vector<std::vector<float>> grads(world, std::vector<float>(n));
  for (int r = 0; r < world; ++r) {
    for (int64_t i = begin; i < end; ++i) grads[r][i - begin] = TestValue(r, i, step);
  }
  const int num_groups = groups.back() + 1;  // numbered by lowest rank: the last is the largest
  std::vector<std::vector<float>> partials(num_groups, std::vector<float>(n));
  for (int g = 0; g < num_groups; ++g) {
    std::vector<const float*> members;
    for (int r = 0; r < world; ++r) {
      if (groups[r] == g) members.push_back(grads[r].data());
    }
    ReduceSum(members.data(), static_cast<int>(members.size()), partials[g].data(), n);
  }
  return partials;
}

// The reference: the tree's mean over the whole shard, then Adam.
std::vector<float> Reference(const std::vector<int>& groups, const v1::JobSpec& spec, int steps) {
  const int64_t n = spec.tensors(0).shape(0);
  auto optimizer = OptimizerFromProto(spec.optimizer());
  EXPECT_TRUE(optimizer.ok());
  std::vector<float> params(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) params[i] = TestValue(0, i, 99);
  std::vector<std::vector<float>> state(2, std::vector<float>(static_cast<size_t>(n), 0.f));
  for (int step = 1; step <= steps; ++step) {
    const std::vector<std::vector<float>> partials = Partials(groups, 0, n, step);
    std::vector<const float*> srcs;
    for (const auto& p : partials) srcs.push_back(p.data());
    float* st[kMaxStateSlots] = {state[0].data(), state[1].data()};
    ReduceAndApply(*optimizer, step, params.data(), srcs.data(), static_cast<int>(srcs.size()), st,
                   static_cast<size_t>(n), static_cast<int>(groups.size()));
  }
  return params;
}

class Harness {
 public:
  explicit Harness(const v1::JobSpec& spec) : job_(InitializedJob(spec, kEpoch)) {}
  int buckets() const { return job_->layout().num_buckets(0); }
  ShardJob& job() { return *job_; }

  // Rank `rank` pushes `values` for `bucket`: the bucket to update if this
  // completed it, or the refusal.
  absl::StatusOr<std::optional<int>> Push(int rank, int bucket, const std::vector<float>& values) {
    FrameHeader h = JobFrame(*job_, kEpoch, FrameType::kPush, rank, bucket);
    h.payload_bytes = values.size() * 4;
    TESSEL_ASSIGN_OR_RETURN(auto dst, job_->AcceptData(h));
    std::memcpy(dst, values.data(), values.size() * 4);
    ShardJob::Completion c = job_->CompleteReceive(h, absl::OkStatus());
    if (c.fold.has_value()) job_->FoldPrefix(*c.fold);
    return c.update;
  }

 private:
  std::unique_ptr<ShardJob> job_;
};

// Trains `steps` steps: for each bucket, group g's push comes from rank
// `pusher(g)`, the groups in the order `order`.
std::vector<float> Train(Harness& t, const std::vector<int>& groups, int steps,
                         const std::vector<int>& order, const std::vector<int>& pusher) {
  for (int step = 1; step <= steps; ++step) {
    for (int b = 0; b < t.buckets(); ++b) {
      const Range br = t.job().layout().bucket_range(0, b);
      const auto partials = Partials(groups, br.begin, br.end, step);
      std::optional<int> complete;
      for (int g : order) {
        auto pushed = t.Push(pusher[g], b, partials[g]);
        EXPECT_TRUE(pushed.ok()) << pushed.status();
        if (pushed.ok() && pushed->has_value()) complete = **pushed;
      }
      EXPECT_EQ(complete, b) << "the bucket is complete once every group pushed";
      if (complete.has_value()) t.job().UpdateBucket(*complete);
    }
    EXPECT_EQ(t.job().version(), step);
  }
  return t.job().ParamsSnapshot();
}

TEST(ShardJobGroupsTest, OnePushPerGroupFromAnyOfItsRanksIsBitwiseTheTree) {
  const std::vector<int> groups = {0, 0, 1, 1};  // two hosts of two workers
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, groups, 20000, 4096);
  Harness t(spec);
  // Group 0's pushes from its second rank, group 1's from its first; group 1
  // lands first.
  ExpectBitwise(Train(t, groups, 3, {1, 0}, {1, 2}), Reference(groups, spec, 3));
}

TEST(ShardJobGroupsTest, UnevenGroupsAndPrefixOrderAreBitwiseTheTree) {
  // Three groups (so prefix order folds them as they land in order), of 1, 3
  // and 2 ranks.
  const std::vector<int> groups = {0, 1, 1, 1, 2, 2};
  const v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, groups, 9000, 1024);
  Harness t(spec);
  ExpectBitwise(Train(t, groups, 2, {0, 1, 2}, {0, 3, 4}), Reference(groups, spec, 2));
  EXPECT_GT(t.job().Stats(/*with_digest=*/false).counters.folded_pushes, 0)
      << "groups landing in order were folded";
}

TEST(ShardJobGroupsTest, FlatIsTheTreeOfSingletons) {
  // rank_groups 0..W-1 is the flat job: the same bits as leaving it empty.
  const std::vector<int> groups = {0, 1, 2};
  v1::JobSpec flat = Spec(v1::STRATEGY_ZERO2, groups, 5000, 1024);
  flat.clear_rank_groups();
  Harness t(flat);
  ExpectBitwise(Train(t, groups, 2, {2, 0, 1}, {0, 1, 2}),
                Reference(groups, Spec(v1::STRATEGY_ZERO2, groups, 5000, 1024), 2));
}

TEST(ShardJobGroupsTest, ASecondPushOfAGroupIsRefusedNamingTheGroup) {
  const std::vector<int> groups = {0, 0, 1, 1};
  Harness t(Spec(v1::STRATEGY_ZERO2, groups, 2000, 4096));
  const Range br = t.job().layout().bucket_range(0, 0);
  const auto partials = Partials(groups, br.begin, br.end, 1);
  ASSERT_TRUE(t.Push(0, 0, partials[0]).ok());
  const std::string digest = t.job().Stats().state_digest;
  auto again = t.Push(1, 0, partials[0]);  // rank 1 is in group 0 too
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(again.status().message(), "group 0 (rank 1's) already pushed"))
      << again.status();
  EXPECT_EQ(t.job().Stats().state_digest, digest);
  // The stall report names groups and their ranks.
  auto stall = t.job().StallReport(absl::Now() + absl::Hours(1), absl::Seconds(1));
  ASSERT_TRUE(stall.has_value());
  EXPECT_TRUE(absl::StrContains(*stall, "group 1 (ranks 2,3; bucket 0 of 1)")) << *stall;
  auto other = t.Push(3, 0, partials[1]);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(*other, 0);
}

TEST(ShardJobGroupsTest, BadGroupingsAreRefusedWithTheReason) {
  struct Case {
    std::vector<int> groups;
    int world;
    const char* says;
  } cases[] = {
      {{0, 0, 1}, 4, "needs one per rank"},
      {{1, 1, 0, 0}, 4, "rank_groups[0] = 1"},
      {{0, 2, 2, 1}, 4, "rank_groups[1] = 2"},
      {{0, -1}, 2, "rank_groups[1] = -1"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = Spec(v1::STRATEGY_ZERO2, std::vector<int>(c.world, 0), 100, 64);
    spec.clear_rank_groups();
    for (int g : c.groups) spec.add_rank_groups(g);
    auto job = ShardJob::Create(spec, 0, kEpoch);
    ASSERT_FALSE(job.ok());
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(job.status().message(), c.says)) << job.status();
  }
  v1::JobSpec topk = Spec(v1::STRATEGY_ZERO2, {0, 0}, 100, 64);
  topk.mutable_compression()->set_topk_ratio(0.1);
  auto job = ShardJob::Create(topk, 0, kEpoch);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::StrContains(job.status().message(), "top-k")) << job.status();
  // Non-contiguous hosts are fine: groups follow their lowest rank.
  EXPECT_TRUE(ShardJob::Create(Spec(v1::STRATEGY_ZERO2, {0, 1, 0, 1}, 100, 64), 0, kEpoch).ok());
}

TEST(ShardJobGroupsTest, DdpAveragesTheGroupsOverTheWorld) {
  const std::vector<int> groups = {0, 0, 0, 1};
  Harness t(Spec(v1::STRATEGY_DDP, groups, 3000, 1024));
  for (int b = 0; b < t.buckets(); ++b) {
    const Range br = t.job().layout().bucket_range(0, b);
    const auto partials = Partials(groups, br.begin, br.end, 1);
    ASSERT_TRUE(t.Push(2, b, partials[0]).ok());
    auto done = t.Push(3, b, partials[1]);
    ASSERT_TRUE(done.ok() && done->has_value());
    t.job().UpdateBucket(**done);
  }
  const std::vector<float> got = t.job().ParamsSnapshot();  // DDP: the averaged gradient
  const auto partials = Partials(groups, 0, 3000, 1);
  std::vector<float> want(3000);
  const float* srcs[] = {partials[0].data(), partials[1].data()};
  ReduceMean(srcs, 2, want.data(), want.size(), 4);
  ExpectBitwise(got, want);
}

}  // namespace
}  // namespace tessel

namespace tessel {
namespace {

// A checkpoint restores across groupings: the hosts of a run (and after an
// elastic change, how many ranks it has) are not the model.
TEST(ShardJobGroupsTest, CheckpointsRestoreAcrossGroupings) {
  const v1::JobSpec flat = Spec(v1::STRATEGY_ZERO2, {0, 1, 2, 3}, 100, 64);
  v1::JobSpec hosts = Spec(v1::STRATEGY_ZERO2, {0, 0, 1, 1}, 100, 64);
  EXPECT_EQ(DiffRestorableSpecs(flat, hosts), "");
  v1::JobSpec shrunk = Spec(v1::STRATEGY_ZERO2, {0, 0, 1}, 100, 64);
  EXPECT_EQ(DiffRestorableSpecs(hosts, shrunk), "");
  // The model still may not change.
  v1::JobSpec ddp = Spec(v1::STRATEGY_DDP, {0, 0, 1, 1}, 100, 64);
  EXPECT_NE(DiffRestorableSpecs(hosts, ddp), "");
}

}  // namespace
}  // namespace tessel
