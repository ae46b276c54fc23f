// ServerReducer against real shard servers in the test process
// (testing/inproc_cluster.h), ranks as threads: the mean over ranks comes
// back exactly, step after step, for a vector on shard 0 and one on every
// shard; the helper job is the one core/job_name.h names and DeleteJob
// removes it; the lent check ends a wait for a rank that never comes.
#include "worker/internal/server_reducer.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/job_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/shard_fleet.h"
#include "testing/inproc_cluster.h"
#include "worker/internal/cluster_fixture.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 2;

class ServerReducerTest : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    ucx_addresses_.assign(2, "");
    for (const auto& m : pool_.members()) {
      if (m.role() == v1::ROLE_SERVER)
        ucx_addresses_[static_cast<size_t>(m.rank())] = m.ucx_address();
    }
  }

  // What rank `rank` of job `job` lends its reducers: its own fleet (one
  // per thread) and the servers' addresses.
  struct Parent {
    std::unique_ptr<JobContext> ctx;
    std::unique_ptr<ShardFleet> fleet;
    ReducerSite site;
  };
  Parent MakeParent(
      const std::string& job, int rank,
      std::function<absl::Status()> check = [] { return absl::OkStatus(); }) {
    Parent p;
    p.ctx = std::make_unique<JobContext>(cluster_->worker_options(job, rank, kWorld));
    p.ctx->epoch = 4;
    p.fleet = std::make_unique<ShardFleet>();
    p.fleet->ConnectView(pool_);
    p.site = ReducerSite{p.ctx.get(), p.fleet.get(), ucx_addresses_, std::move(check)};
    return p;
  }

  bool HasJob(const std::string& job, int shard) {
    ShardFleet fleet;
    fleet.ConnectView(pool_);
    v1::JobRef ref;
    ref.set_job(job);
    v1::ShardStats st;
    return fleet.Call(shard, &v1::ShardServer::Stub::GetStats, ref, &st, "GetStats").ok();
  }

  std::vector<std::string> ucx_addresses_;
};

// Rank r's value at element i of round k: integers, so the mean of two is
// exact whatever the order of the sum.
float Value(int rank, int round, size_t i) {
  return static_cast<float>((static_cast<int>(i % 1000) + 1) * (rank + 1) + round);
}

TEST_F(ServerReducerTest, MeansOverRanksExactlyOnOneShardAndOnEvery) {
  const size_t small = 5;
  const size_t large = kReducerShardAllFrom + 3;
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      Parent parent = MakeParent("mean", r);
      for (size_t size : {small, large}) {
        auto reducer = ServerReducer::Make(parent.site, size);
        ASSERT_TRUE(reducer.ok()) << reducer.status();
        for (int round = 0; round < 3; ++round) {
          std::vector<float> data(size);
          for (size_t i = 0; i < size; ++i) data[i] = Value(r, round, i);
          absl::Status s = (*reducer)->Mean(absl::MakeSpan(data));
          ASSERT_TRUE(s.ok()) << s;
          for (size_t i = 0; i < size; ++i) {
            const float want = (Value(0, round, i) + Value(1, round, i)) / 2;
            ASSERT_EQ(data[i], want) << "size " << size << " round " << round << " element " << i;
          }
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  // The helper jobs, by the one grammar, at the parent's epoch: the small
  // one on shard 0 only, the large one on both.
  const std::string small_job = HelperJobName("mean", static_cast<int64_t>(small), 4);
  const std::string large_job = HelperJobName("mean", static_cast<int64_t>(large), 4);
  EXPECT_TRUE(HasJob(small_job, 0));
  EXPECT_FALSE(HasJob(small_job, 1));
  EXPECT_TRUE(HasJob(large_job, 0));
  EXPECT_TRUE(HasJob(large_job, 1));

  Parent parent = MakeParent("mean", 0);
  auto reducer = ServerReducer::Make(parent.site, large);  // the job exists: joins it
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  (*reducer)->DeleteJob();
  EXPECT_FALSE(HasJob(large_job, 0));
  EXPECT_FALSE(HasJob(large_job, 1));
}

TEST_F(ServerReducerTest, TheLentCheckEndsAWaitForARankThatNeverComes) {
  Parent parent = MakeParent("alone", 0, [] { return absl::AbortedError("rank 1 was lost"); });
  auto reducer = ServerReducer::Make(parent.site, 8);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  std::vector<float> data(8, 1.f);
  absl::Status s = (*reducer)->Mean(absl::MakeSpan(data));
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1 was lost"));
  (*reducer)->DeleteJob();
}

TEST_F(ServerReducerTest, AVectorOfAnotherSizeIsRefused) {
  Parent parent = MakeParent("sizes", 0);
  auto reducer = ServerReducer::Make(parent.site, 8);
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  std::vector<float> data(9, 1.f);
  EXPECT_TRUE(absl::IsInvalidArgument((*reducer)->Mean(absl::MakeSpan(data))));
  (*reducer)->DeleteJob();
}

TEST_F(ServerReducerTest, AShardNotReachedIsUnavailable) {
  Parent parent = MakeParent("unreached", 0);
  parent.site.ucx_addresses[0].clear();
  auto reducer = ServerReducer::Make(parent.site, 8);
  EXPECT_TRUE(absl::IsUnavailable(reducer.status())) << reducer.status();
  EXPECT_THAT(std::string(reducer.status().message()), HasSubstr("cannot reach shard 0"));
}

}  // namespace
}  // namespace tessel::internal
