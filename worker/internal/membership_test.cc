// Membership against a real registry and real shard servers in the test
// process (testing/inproc_cluster.h): Join waits for the whole world and
// finds every shard; a worker leaving and a server restarting are seen by
// the checks every wait runs, with what to start; WaitForComplete waits for
// the job to be whole again (a replacement, the restarted server at its new
// address) and says who it waits for; the views it keeps feed the
// aggregation plan.
#include "worker/internal/membership.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/inproc_cluster.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

// One worker's side: its context, channel and membership (left first).
struct Rank {
  Rank(const WorkerOptions& o) : ctx(o) {
    auto transport = o.transport();
    EXPECT_TRUE(transport.ok()) << transport.status();
    channel = std::make_unique<DataChannel>(&ctx, std::move(*transport));
    membership = std::make_unique<Membership>(&ctx, channel.get(), ClientCredentials{});
  }
  ~Rank() { membership.reset(); }
  JobContext ctx;
  std::unique_ptr<DataChannel> channel;
  std::unique_ptr<Membership> membership;
};

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcCluster::Options options;
    options.servers = 2;
    options.lease_ttl = absl::Seconds(3);
    cluster_ = std::make_unique<InProcCluster>(options);
    ASSERT_TRUE(cluster_->Start().ok());
  }
  void TearDown() override {
    ranks_.clear();
    cluster_->Stop();
  }

  WorkerOptions Options(int rank, int world) {
    WorkerOptions o = cluster_->worker_options("members", rank, world);
    o.recovery = true;
    o.host_id = "one-host";
    o.aggregation = Aggregation::kHost;
    o.rejoin_in_place = rejoin_in_place_;
    o.recovery_timeout = recovery_timeout_;
    return o;
  }
  // Ranks 0..world-1 join at once; every Join's status.
  std::vector<absl::Status> JoinAll(int world) {
    std::vector<absl::Status> joined(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<Rank>(Options(r, world)));
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] { joined[r] = ranks_[r]->membership->Join(); });
    }
    for (auto& t : threads) t.join();
    return joined;
  }
  // Runs `check` until it fails (or 15 s pass); its last status.
  static absl::Status UntilFails(const std::function<absl::Status()>& check) {
    absl::Status s;
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while ((s = check()).ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    return s;
  }

  std::unique_ptr<InProcCluster> cluster_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  // Off for the tests of the rollback's contract (a lost worker fails the
  // step); on for the in-place ones.
  bool rejoin_in_place_ = false;
  absl::Duration recovery_timeout_ = absl::Seconds(60);
};

TEST_F(MembershipTest, JoinWaitsForTheWholeWorldAndFindsEveryShard) {
  for (const absl::Status& s : JoinAll(2)) ASSERT_TRUE(s.ok()) << s;
  for (const auto& rank : ranks_) {
    Membership& m = *rank->membership;
    EXPECT_EQ(m.num_servers(), 2);
    EXPECT_EQ(m.fleet().size(), 2);
    EXPECT_EQ(rank->channel->num_shards(), 2);
    for (const std::string& a : m.ucx_addresses()) EXPECT_FALSE(a.empty());
    EXPECT_EQ(m.member_ids(), (std::vector<int>{0, 1}));
    EXPECT_GT(rank->ctx.epoch.load(), 0);
    EXPECT_EQ(m.view_epoch(), rank->ctx.epoch.load());
    EXPECT_TRUE(m.Check().ok());
    // Its registry membership, which GetFrameKey names (key handovers).
    auto view = m.registry().GetView("members");
    ASSERT_TRUE(view.ok()) << view.status();
    for (const v1::Member& member : view->members()) {
      if (member.role() == v1::ROLE_WORKER && member.rank() == rank->ctx.id) {
        EXPECT_EQ(rank->ctx.member_epoch.load(), member.joined_epoch());
      }
    }
    EXPECT_GT(rank->ctx.member_epoch.load(), 0);
    // The view it kept: both workers registered from one host.
    EXPECT_EQ(m.aggregation().Plan({0, 1}).groups, (std::vector<int>{0, 0}));
  }
  auto fleet = ranks_[0]->membership->CurrentFleet(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_EQ((*fleet)->size(), 2);
}

TEST_F(MembershipTest, JoinAloneEndsAtTheConnectTimeoutNamingTheWorld) {
  WorkerOptions o = Options(0, 2);
  o.connect_timeout = absl::Seconds(1);
  ranks_.push_back(std::make_unique<Rank>(o));
  absl::Status s = ranks_[0]->membership->Join();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not all 2 workers joined"));
}

TEST_F(MembershipTest, AWorkerThatLeftIsSeenAndItsReplacementCompletesTheJob) {
  for (const absl::Status& s : JoinAll(2)) ASSERT_TRUE(s.ok()) << s;
  Membership& m = *ranks_[0]->membership;
  ranks_[1].reset();  // leaves the registry
  absl::Status left = UntilFails([&] { return m.CheckMembers(); });
  EXPECT_EQ(left.code(), absl::StatusCode::kAborted) << left;
  EXPECT_THAT(std::string(left.message()), HasSubstr("worker rank(s) 1 left the job"));
  EXPECT_TRUE(IsRecoverable(left));
  EXPECT_FALSE(m.Check().ok());

  std::vector<int> ids;
  absl::Status alone =
      m.WaitForComplete(absl::Now() + absl::Milliseconds(300), absl::InfiniteFuture(), &ids);
  EXPECT_EQ(alone.code(), absl::StatusCode::kDeadlineExceeded) << alone;
  EXPECT_THAT(std::string(alone.message()),
              HasSubstr("worker rank(s) 1 (start a replacement with --rank=1 --resume)"));

  WorkerOptions o = Options(1, 2);
  o.resume = true;
  ranks_[1] = std::make_unique<Rank>(o);
  ASSERT_TRUE(ranks_[1]->membership->Join().ok());
  ASSERT_TRUE(
      m.WaitForComplete(absl::Now() + absl::Seconds(10), absl::InfiniteFuture(), &ids).ok());
  EXPECT_EQ(ids, (std::vector<int>{0, 1}));
  m.Adopt(ids);
  EXPECT_TRUE(m.CheckMembers().ok());
}

// A job that rejoins in place (rejoin.h): the check of a survivor's wait
// waits in the step for the replacement and then lets the step go on.
TEST_F(MembershipTest, ALostWorkerIsWaitedForInTheStepWhenTheJobRejoinsInPlace) {
  rejoin_in_place_ = true;
  for (const absl::Status& s : JoinAll(2)) ASSERT_TRUE(s.ok()) << s;
  Membership& m = *ranks_[0]->membership;
  const int64_t before = m.view_epoch();
  ranks_[1].reset();  // leaves the registry
  absl::Status joined = absl::UnknownError("not started");
  std::thread replacement([&] {
    // Later than the survivor's heartbeat (a third of the lease) brings the
    // change, so its check is the one that waits.
    absl::SleepFor(absl::Milliseconds(2500));
    WorkerOptions o = Options(1, 2);
    o.resume = true;
    ranks_[1] = std::make_unique<Rank>(o);
    joined = ranks_[1]->membership->Join();
  });
  // The checks see nothing until the heartbeat brings the new group epoch;
  // the one that does waits until rank 1 is back, then says OK.
  absl::Status waited;
  absl::Duration longest;
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (m.view_epoch() == before && absl::Now() < deadline) {
    const absl::Time start = absl::Now();
    waited = m.CheckMembers();
    longest = std::max(longest, absl::Now() - start);
    if (!waited.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  replacement.join();
  EXPECT_TRUE(waited.ok()) << waited;
  EXPECT_TRUE(joined.ok()) << joined;
  EXPECT_GT(m.view_epoch(), before);
  EXPECT_GT(longest, absl::Milliseconds(300)) << "the check did not wait for the replacement";
  EXPECT_EQ(m.member_ids(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(m.Check().ok());
}

TEST_F(MembershipTest, AWorkerNeverReplacedFailsTheWaitingStepAfterTheRecoveryTimeout) {
  rejoin_in_place_ = true;
  recovery_timeout_ = absl::Seconds(1);
  for (const absl::Status& s : JoinAll(2)) ASSERT_TRUE(s.ok()) << s;
  Membership& m = *ranks_[0]->membership;
  ranks_[1].reset();
  absl::Status gave_up = UntilFails([&] { return m.CheckMembers(); });
  EXPECT_EQ(gave_up.code(), absl::StatusCode::kDeadlineExceeded) << gave_up;
  EXPECT_THAT(std::string(gave_up.message()),
              HasSubstr("worker rank(s) 1 (start a replacement with --rank=1 --resume)"));
}

TEST_F(MembershipTest, ARestartedServerIsSeenAndReconnectedAtItsNewAddress) {
  for (const absl::Status& s : JoinAll(1)) ASSERT_TRUE(s.ok()) << s;
  Membership& m = *ranks_[0]->membership;
  const std::string before = m.ucx_addresses()[1];
  ASSERT_TRUE(cluster_->RestartServer(1).ok());
  absl::Status gone = UntilFails([&] { return m.CheckServers(); });
  EXPECT_EQ(gone.code(), absl::StatusCode::kAborted) << gone;
  EXPECT_THAT(std::string(gone.message()), HasSubstr("shard server(s) 1 ("));
  EXPECT_THAT(std::string(gone.message()), HasSubstr("restart it with the same --shard"));
  EXPECT_TRUE(IsRecoverable(gone));

  std::vector<int> ids;
  ASSERT_TRUE(
      m.WaitForComplete(absl::Now() + absl::Seconds(10), absl::InfiniteFuture(), &ids).ok());
  EXPECT_EQ(ids, (std::vector<int>{0}));
  EXPECT_NE(m.ucx_addresses()[1], before);
  EXPECT_TRUE(m.CheckServers().ok());
}

}  // namespace
}  // namespace tessel::internal
