#include "server/registry.h"

#include "gtest/gtest.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"
#include "server/registry_service.h"

namespace tessel {
namespace {

v1::Member Worker(const std::string& group, int rank) {
  v1::Member m;
  m.set_group(group);
  m.set_role(v1::ROLE_WORKER);
  m.set_rank(rank);
  m.set_grpc_address("127.0.0.1:1");
  return m;
}

class FakeClock {
 public:
  absl::Time Now() const { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST(RegistryTest, JoinLeaveAndExpiryBumpEpochs) {
  FakeClock clock;
  Registry registry(absl::Seconds(3), [&] { return clock.Now(); });
  auto a = registry.Join(Worker("job", 0), absl::ZeroDuration());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->view.epoch(), 1);
  auto b = registry.Join(Worker("job", 1), absl::Seconds(1));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->view.epoch(), 2);
  EXPECT_EQ(b->view.members_size(), 2);

  clock.Advance(absl::Milliseconds(800));
  ASSERT_TRUE(registry.Heartbeat(b->lease_id).ok());
  clock.Advance(absl::Milliseconds(800));
  EXPECT_EQ(registry.ExpireLeases(), 0);  // renewed
  clock.Advance(absl::Milliseconds(1300));
  EXPECT_EQ(registry.ExpireLeases(), 1);  // b lapsed, a (3 s) alive
  EXPECT_EQ(registry.GetView("job").epoch(), 3);
  EXPECT_EQ(registry.GetView("job").members_size(), 1);
  EXPECT_EQ(registry.Heartbeat(b->lease_id).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(registry.Leave(a->lease_id).ok());
  EXPECT_EQ(registry.GetView("job").epoch(), 4);
  EXPECT_EQ(registry.Leave(a->lease_id).code(), absl::StatusCode::kNotFound);
  // Epochs never go backwards, even through an empty group.
  auto c = registry.Join(Worker("job", 0), absl::ZeroDuration());
  EXPECT_EQ(c->view.epoch(), 5);
}

TEST(RegistryTest, RejectsTakenRankAndBadMembers) {
  Registry registry(absl::Seconds(3));
  ASSERT_TRUE(registry.Join(Worker("job", 0), absl::ZeroDuration()).ok());
  auto dup = registry.Join(Worker("job", 0), absl::ZeroDuration());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.GetView("job").epoch(), 1);  // refused join changes nothing
  EXPECT_TRUE(registry.Join(Worker("other", 0), absl::ZeroDuration()).ok());
  EXPECT_FALSE(registry.Join(Worker("", 0), absl::ZeroDuration()).ok());
  EXPECT_FALSE(registry.Join(Worker("job", -1), absl::ZeroDuration()).ok());
  EXPECT_FALSE(registry.Join(Worker("job", 5), absl::Milliseconds(1)).ok());
  v1::Member no_role = Worker("job", 3);
  no_role.set_role(v1::ROLE_UNSPECIFIED);
  EXPECT_FALSE(registry.Join(no_role, absl::ZeroDuration()).ok());
}

// The real gRPC service on a free port, with real clients: heartbeats keep a
// lease alive; a client that stops heartbeating is removed and watchers see it.
TEST(RegistryServiceTest, LeasesWatchesOverGrpc) {
  RegistryService service(absl::Milliseconds(600));
  std::string bound;
  auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
  ASSERT_TRUE(server.ok()) << server.status();

  RegistryClient alive(bound);
  auto joined = alive.Join(Worker("job", 0));
  ASSERT_TRUE(joined.ok()) << joined.status();
  {
    RegistryClient leaver(bound);
    ASSERT_TRUE(leaver.Join(Worker("job", 1)).ok());
    auto two = alive.WaitForView(
        "job", [](const v1::View& v) { return v.members_size() == 2; }, absl::Seconds(5));
    ASSERT_TRUE(two.ok()) << two.status();
  }  // leaver leaves
  auto one = alive.WaitForView(
      "job", [](const v1::View& v) { return v.members_size() == 1; }, absl::Seconds(5));
  ASSERT_TRUE(one.ok()) << one.status();

  absl::SleepFor(absl::Milliseconds(1500));  // > 2 ttl: only heartbeats keep us in
  auto view = alive.GetView("job");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->members_size(), 1);
  EXPECT_TRUE(alive.lease_status().ok());

  auto timeout = alive.WaitForView(
      "job", [](const v1::View& v) { return v.members_size() == 5; }, absl::Milliseconds(300));
  EXPECT_EQ(timeout.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(timeout.status().message().find("worker 0"), std::string::npos) << timeout.status();

  ASSERT_TRUE(alive.Leave().ok());
  service.Stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

}  // namespace
}  // namespace tessel
