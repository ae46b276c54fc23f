// One conformance suite for every Registry backend (memory, etcd), each built
// by RegistryBackends (backend_factory.h), then what only one backend
// promises: exact +1 epochs on an injectable clock (memory), durable state
// across registry restarts (etcd), and the gRPC service end to end.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "registry/backend_factory.h"
#include "registry/etcd/etcd_registry.h"
#include "registry/etcd/etcd_test_util.h"
#include "registry/memory/memory_registry.h"
#include "registry/registry.h"
#include "registry/registry_service.h"
#include "rpc/grpc_util.h"
#include "rpc/registry_client.h"
#include "rpc/view_delta.h"

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

// One set of backends for the whole test binary: its etcd is started by the
// first test that needs it and killed after the last; each test uses its own
// key prefix.
std::unique_ptr<RegistryBackends>& BackendsInstance() {
  static auto* backends = new std::unique_ptr<RegistryBackends>();
  return *backends;
}

RegistryBackends& Backends() {
  std::unique_ptr<RegistryBackends>& backends = BackendsInstance();
  if (backends == nullptr) backends = std::make_unique<RegistryBackends>(::testing::TempDir());
  return *backends;
}

class BackendsEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { BackendsInstance().reset(); }
};
const auto* const kBackendsEnvironment =
    ::testing::AddGlobalTestEnvironment(new BackendsEnvironment);

// A key prefix of this test's own, e.g. /test/Backends_RegistryConformanceTest.Join_etcd.
std::string TestPrefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  std::replace(name.begin(), name.end(), '/', '_');
  return "/test/" + name;
}

class RegistryConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::Status available = RegistryBackends::Available(GetParam());
    if (!available.ok()) GTEST_SKIP() << available.message();
    registry_ = Make();
    ASSERT_NE(registry_, nullptr);
    // The host's expiry timer, as RegistryService runs it.
    pump_ = std::thread([this] {
      while (!stop_.load()) {
        registry_->ExpireLeases();
        absl::SleepFor(absl::Milliseconds(20));
      }
    });
  }
  void TearDown() override {
    stop_.store(true);
    if (pump_.joinable()) pump_.join();
  }

  // A new registry over the same state (for etcd); default ttl 1 s.
  std::unique_ptr<Registry> Make() {
    auto r =
        Backends().Make(GetParam(), {.default_ttl = absl::Seconds(1), .etcd_prefix = TestPrefix()});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  int64_t Epoch(const std::string& group) {
    auto view = registry_->GetView(group);
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? view->epoch() : -1;
  }

  std::unique_ptr<Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

TEST_P(RegistryConformanceTest, JoinAndTakenRankIsAlreadyExists) {
  auto view = registry_->GetView("job");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->epoch(), 0);
  EXPECT_EQ(view->members_size(), 0);

  auto a = registry_->Join(Worker("job", 0), absl::Seconds(30));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->view.epoch(), 0);
  ASSERT_EQ(a->view.members_size(), 1);
  EXPECT_EQ(a->view.members(0).rank(), 0);
  EXPECT_GE(a->ttl, absl::Seconds(30));

  auto dup = registry_->Join(Worker("job", 0), absl::Seconds(30));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists) << dup.status();
  EXPECT_EQ(Epoch("job"), a->view.epoch());  // a refused join changes nothing

  v1::Member server = Worker("job", 0);
  server.set_role(v1::ROLE_SERVER);  // same rank, other role: a different slot
  auto s = registry_->Join(server, absl::Seconds(30));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->view.epoch(), a->view.epoch());
  ASSERT_EQ(s->view.members_size(), 2);
  EXPECT_EQ(s->view.members(0).role(), v1::ROLE_WORKER);  // sorted by (role, rank)
  EXPECT_EQ(s->view.members(1).role(), v1::ROLE_SERVER);
  EXPECT_TRUE(registry_->Join(Worker("other/job", 0), absl::Seconds(30)).ok());

  EXPECT_FALSE(registry_->Join(Worker("", 0), absl::ZeroDuration()).ok());
  EXPECT_FALSE(registry_->Join(Worker("job", -1), absl::ZeroDuration()).ok());
  EXPECT_FALSE(registry_->Join(Worker("job", 5), absl::Milliseconds(1)).ok());
  v1::Member no_role = Worker("job", 3);
  no_role.set_role(v1::ROLE_UNSPECIFIED);
  EXPECT_FALSE(registry_->Join(no_role, absl::ZeroDuration()).ok());
  EXPECT_EQ(Epoch("job"), s->view.epoch());
}

TEST_P(RegistryConformanceTest, HeartbeatKeepsLeaseAlive) {
  auto a = registry_->Join(Worker("job", 0), absl::Seconds(1));
  ASSERT_TRUE(a.ok()) << a.status();
  const absl::Time end = absl::Now() + absl::Milliseconds(2500);
  while (absl::Now() < end) {
    auto epoch = registry_->Heartbeat(a->lease_id);
    ASSERT_TRUE(epoch.ok()) << epoch.status();
    EXPECT_EQ(*epoch, a->view.epoch());
    absl::SleepFor(absl::Milliseconds(200));
  }
  auto view = registry_->GetView("job");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->epoch(), a->view.epoch());
  EXPECT_EQ(registry_->Heartbeat(a->lease_id + 12345).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(RegistryConformanceTest, LeaveRemovesMemberAndBumpsEpoch) {
  auto a = registry_->Join(Worker("job", 0), absl::Seconds(30));
  auto b = registry_->Join(Worker("job", 1), absl::Seconds(30));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(registry_->Leave(a->lease_id).ok());
  auto view = registry_->GetView("job");
  ASSERT_TRUE(view.ok());
  EXPECT_GT(view->epoch(), b->view.epoch());
  ASSERT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->members(0).rank(), 1);
  EXPECT_EQ(registry_->Leave(a->lease_id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Heartbeat(a->lease_id).status().code(), absl::StatusCode::kNotFound);
  // The rank is free again.
  auto again = registry_->Join(Worker("job", 0), absl::Seconds(30));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->view.epoch(), view->epoch());
}

// The registry stamps every membership with the epoch it began at, whatever
// the joiner sent: the same process joining again under the same rank and
// address (its lease lapsed) is told apart from a member that never left.
TEST_P(RegistryConformanceTest, EveryMembershipCarriesTheEpochItBeganAt) {
  v1::Member forged = Worker("job", 0);
  forged.set_joined_epoch(1000);
  auto a = registry_->Join(forged, absl::Seconds(30));
  auto b = registry_->Join(Worker("job", 1), absl::Seconds(30));
  ASSERT_TRUE(a.ok() && b.ok());
  auto joined_epoch = [this](int rank) -> int64_t {
    auto view = registry_->GetView("job");
    for (const auto& m : view->members()) {
      if (m.rank() == rank) return m.joined_epoch();
    }
    return -1;
  };
  EXPECT_EQ(joined_epoch(0), a->view.epoch());
  EXPECT_EQ(joined_epoch(1), b->view.epoch());
  ASSERT_TRUE(registry_->Heartbeat(a->lease_id).ok());
  EXPECT_EQ(joined_epoch(0), a->view.epoch()) << "a heartbeat changes nothing";
  ASSERT_TRUE(registry_->Leave(a->lease_id).ok());
  auto again = registry_->Join(Worker("job", 0), absl::Seconds(30));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(joined_epoch(0), again->view.epoch());
  EXPECT_GT(joined_epoch(0), a->view.epoch());
  EXPECT_EQ(joined_epoch(1), b->view.epoch()) << "the other member's stays";
}

TEST_P(RegistryConformanceTest, LeaseExpiryRemovesMemberAndBumpsEpoch) {
  auto stays = registry_->Join(Worker("job", 0), absl::Seconds(30));
  auto lapses = registry_->Join(Worker("job", 1), absl::Seconds(1));
  ASSERT_TRUE(stays.ok() && lapses.ok());
  const absl::Time start = absl::Now();
  auto view = registry_->WaitForChange("job", lapses->view.epoch(), absl::Seconds(15));
  ASSERT_TRUE(view.ok()) << view.status();
  const absl::Duration took = absl::Now() - start;
  EXPECT_GT(view->epoch(), lapses->view.epoch());
  ASSERT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->members(0).rank(), 0);
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_EQ(registry_->Heartbeat(lapses->lease_id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_->Heartbeat(stays->lease_id).ok());
}

TEST_P(RegistryConformanceTest, EpochsNeverGoBackwardsThroughAnEmptyGroup) {
  int64_t last = Epoch("job");
  for (int round = 0; round < 3; ++round) {
    auto a = registry_->Join(Worker("job", 0), absl::Seconds(30));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_GT(a->view.epoch(), last);
    last = a->view.epoch();
    ASSERT_TRUE(registry_->Leave(a->lease_id).ok());
    auto empty = registry_->GetView("job");
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(empty->members_size(), 0);
    EXPECT_GT(empty->epoch(), last);
    last = empty->epoch();
  }
  // An emptied group is still listed, with its epoch.
  auto groups = registry_->ListGroups();
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 1u);
  EXPECT_EQ((*groups)[0].epoch(), last);
}

TEST_P(RegistryConformanceTest, WaitForChangeWakesOnJoinAndTimesOut) {
  auto a = registry_->Join(Worker("job", 0), absl::Seconds(30));
  ASSERT_TRUE(a.ok());
  const absl::Time start = absl::Now();
  auto quiet = registry_->WaitForChange("job", a->view.epoch(), absl::Milliseconds(300));
  EXPECT_EQ(quiet.status().code(), absl::StatusCode::kDeadlineExceeded) << quiet.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));

  std::thread joiner([this] {
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_TRUE(registry_->Join(Worker("job", 1), absl::Seconds(30)).ok());
  });
  auto woke = registry_->WaitForChange("job", a->view.epoch(), absl::Seconds(10));
  joiner.join();
  ASSERT_TRUE(woke.ok()) << woke.status();
  EXPECT_GT(woke->epoch(), a->view.epoch());
  EXPECT_EQ(woke->members_size(), 2);
  // Already past: returns at once.
  auto past = registry_->WaitForChange("job", 0, absl::Seconds(10));
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->epoch(), woke->epoch());
}

TEST_P(RegistryConformanceTest, ListGroupsAndMembers) {
  auto a = registry_->Join(Worker("b-job", 1), absl::Seconds(30));
  auto b = registry_->Join(Worker("b-job", 0), absl::Seconds(30));
  v1::Member server = Worker("a-pool", 0);
  server.set_role(v1::ROLE_SERVER);
  auto c = registry_->Join(server, absl::Seconds(30));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto groups = registry_->ListGroups();
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].group(), "a-pool");
  EXPECT_EQ((*groups)[0].members_size(), 1);
  EXPECT_EQ((*groups)[1].group(), "b-job");
  ASSERT_EQ((*groups)[1].members_size(), 2);
  EXPECT_EQ((*groups)[1].members(0).rank(), 0);
  EXPECT_EQ((*groups)[1].epoch(), b->view.epoch());

  auto members = registry_->ListMembers();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 3u);
  for (const Registry::Leased& m : *members) {
    const int64_t want = m.member.group() == "a-pool" ? c->lease_id
                         : m.member.rank() == 1       ? a->lease_id
                                                      : b->lease_id;
    EXPECT_EQ(m.lease_id, want) << m.member.ShortDebugString();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RegistryConformanceTest,
                         ::testing::ValuesIn(RegistryBackends::Names()),
                         [](const auto& info) { return info.param; });

// etcd only: the state lives in etcd, so a new registry process sees the
// members, their leases still work, and epochs continue from where they were,
// including expiries that happened while no registry ran.
TEST(EtcdRegistryTest, RestartKeepsMembersAndEpochs) {
  if (!EtcdProcess::Available()) GTEST_SKIP() << EtcdProcess::kMissing;
  const RegistryBackendOptions options{.etcd_prefix = TestPrefix()};
  int64_t lease0, lease1, epoch;
  {
    auto first = Backends().Make("etcd", options);
    ASSERT_TRUE(first.ok()) << first.status();
    auto a = (*first)->Join(Worker("job", 0), absl::Seconds(30));
    auto b = (*first)->Join(Worker("job", 1), absl::Seconds(30));
    auto c = (*first)->Join(Worker("job", 2), absl::Seconds(1));  // lapses while down
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    lease0 = a->lease_id;
    lease1 = b->lease_id;
    epoch = c->view.epoch();
    EXPECT_EQ(epoch, 3);
  }
  absl::SleepFor(absl::Milliseconds(2500));
  auto second = Backends().Make("etcd", options);
  ASSERT_TRUE(second.ok()) << second.status();
  auto view = (*second)->GetView("job");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->members_size(), 2);
  EXPECT_EQ(view->epoch(), epoch + 1);  // worker 2's expiry, seen on restart
  auto hb = (*second)->Heartbeat(lease0);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(*hb, view->epoch());
  ASSERT_TRUE((*second)->Leave(lease1).ok());
  auto after = (*second)->GetView("job");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->epoch(), view->epoch() + 1);
  EXPECT_EQ(after->members_size(), 1);
}

// etcd only: two registries over one etcd see each other's changes, and
// WaitForChange on one wakes for a lease that lapses (etcd deletes the key;
// the watcher bumps the epoch exactly once between them).
TEST(EtcdRegistryTest, TwoRegistriesShareOneEtcd) {
  if (!EtcdProcess::Available()) GTEST_SKIP() << EtcdProcess::kMissing;
  const RegistryBackendOptions options{.etcd_prefix = TestPrefix()};
  auto one = Backends().Make("etcd", options);
  auto two = Backends().Make("etcd", options);
  ASSERT_TRUE(one.ok() && two.ok());
  auto a = (*one)->Join(Worker("job", 0), absl::Seconds(1));
  ASSERT_TRUE(a.ok());
  auto b = (*two)->Join(Worker("job", 0), absl::Seconds(1));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAlreadyExists);
  auto c = (*two)->Join(Worker("job", 1), absl::Seconds(30));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->view.epoch(), a->view.epoch() + 1);
  auto gone = (*one)->WaitForChange("job", c->view.epoch(), absl::Seconds(10));
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->members_size(), 1);
  EXPECT_EQ(gone->epoch(), c->view.epoch() + 1);
  absl::SleepFor(absl::Milliseconds(300));  // both watchers have run
  auto seen = (*two)->GetView("job");
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->epoch(), gone->epoch());
}

TEST(EtcdRegistryTest, UnreachableEtcdNamesTheEndpoint) {
  auto r =
      EtcdRegistry::Connect({.endpoints = {"127.0.0.1:1"}, .rpc_timeout = absl::Milliseconds(500)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("--etcd_endpoints"), std::string::npos) << r.status();
}

class FakeClock {
 public:
  absl::Time Now() const { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

// Memory only: an injectable clock, and epochs that move by exactly one.
TEST(MemoryRegistryTest, JoinLeaveAndExpiryBumpEpochsByOne) {
  FakeClock clock;
  const int64_t before = absl::ToUnixMicros(absl::Now());
  MemoryRegistry registry(absl::Seconds(3), [&] { return clock.Now(); });
  auto a = registry.Join(Worker("job", 0), absl::ZeroDuration());
  ASSERT_TRUE(a.ok());
  // A group's first epoch is the registry's start time in Unix us + 1.
  const int64_t base = a->view.epoch() - 1;
  EXPECT_GE(base + 1, before);
  auto b = registry.Join(Worker("job", 1), absl::Seconds(1));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->view.epoch(), base + 2);
  EXPECT_EQ(b->view.members_size(), 2);

  clock.Advance(absl::Milliseconds(800));
  ASSERT_TRUE(registry.Heartbeat(b->lease_id).ok());
  clock.Advance(absl::Milliseconds(800));
  EXPECT_EQ(registry.ExpireLeases(), 0);  // renewed
  clock.Advance(absl::Milliseconds(1300));
  EXPECT_EQ(registry.ExpireLeases(), 1);  // b lapsed, a (3 s) alive
  EXPECT_EQ(registry.GetView("job")->epoch(), base + 3);
  EXPECT_EQ(registry.GetView("job")->members_size(), 1);
  EXPECT_EQ(registry.Heartbeat(b->lease_id).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(registry.Leave(a->lease_id).ok());
  EXPECT_EQ(registry.GetView("job")->epoch(), base + 4);
  EXPECT_EQ(registry.Leave(a->lease_id).code(), absl::StatusCode::kNotFound);
  auto c = registry.Join(Worker("job", 0), absl::ZeroDuration());
  EXPECT_EQ(c->view.epoch(), base + 5);
}

// A restarted memory registry (a new process) hands out epochs newer than
// any its predecessor did: members fence with them.
TEST(MemoryRegistryTest, EpochsDoNotGoBackAcrossARestart) {
  int64_t last = 0;
  {
    MemoryRegistry first(absl::Seconds(3));
    for (int i = 0; i < 50; ++i) {
      auto joined = first.Join(Worker("job", 0), absl::ZeroDuration());
      ASSERT_TRUE(joined.ok());
      ASSERT_TRUE(first.Leave(joined->lease_id).ok());
    }
    last = first.GetView("job")->epoch();
  }
  absl::SleepFor(absl::Milliseconds(2));
  MemoryRegistry second(absl::Seconds(3));
  auto joined = second.Join(Worker("job", 0), absl::ZeroDuration());
  ASSERT_TRUE(joined.ok());
  EXPECT_GT(joined->view.epoch(), last);
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

// Watch with deltas: after the first full view a watcher receives only what
// changed (a join: that member; a leave: its key), a tenth of the full view's
// bytes in a group of 32, and applying the deltas gives GetView's view. A
// delta from another epoch is refused. Without deltas the stream sends full
// views, as before.
TEST(RegistryServiceTest, WatchDeltasCarryOnlyWhatChanged) {
  RegistryService service(absl::Seconds(30));
  std::string bound;
  auto server = StartGrpcServer("127.0.0.1:0", {&service}, &bound);
  ASSERT_TRUE(server.ok()) << server.status();
  auto member = [](int rank) {
    v1::Member m = Worker("big", rank);
    m.set_ucx_address(std::string(300, 'u'));  // a packed UCX address's size
    return m;
  };
  std::vector<std::unique_ptr<RegistryClient>> clients;
  for (int r = 0; r < 32; ++r) {
    clients.push_back(std::make_unique<RegistryClient>(bound));
    ASSERT_TRUE(clients.back()->Join(member(r)).ok());
  }
  auto stub = v1::Registry::NewStub(grpc::CreateChannel(bound, grpc::InsecureChannelCredentials()));
  auto watch = [&](grpc::ClientContext* ctx, bool deltas) {
    v1::WatchRequest req;
    req.set_group("big");
    req.set_deltas(deltas);
    return stub->Watch(ctx, req);
  };
  grpc::ClientContext ctx, full_ctx;
  auto reader = watch(&ctx, true);
  auto full_reader = watch(&full_ctx, false);
  v1::View first, full;
  ASSERT_TRUE(reader->Read(&first));
  ASSERT_TRUE(full_reader->Read(&full));
  EXPECT_FALSE(first.delta());
  ASSERT_EQ(first.members_size(), 32);
  v1::View mine = first;
  auto same_as_registry = [&] {
    auto now = clients[0]->GetView("big");
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(mine.SerializeAsString(), now->SerializeAsString());
  };

  RegistryClient extra(bound);
  ASSERT_TRUE(extra.Join(member(32)).ok());
  v1::View joined;
  ASSERT_TRUE(reader->Read(&joined));
  EXPECT_TRUE(joined.delta());
  EXPECT_EQ(joined.base_epoch(), first.epoch());
  ASSERT_EQ(joined.members_size(), 1);
  EXPECT_EQ(joined.members(0).rank(), 32);
  EXPECT_EQ(joined.removed_size(), 0);
  std::cout << "a join among 32: delta " << joined.ByteSizeLong() << " bytes, full view "
            << first.ByteSizeLong() << " bytes\n";
  EXPECT_LT(joined.ByteSizeLong() * 10, first.ByteSizeLong());
  ASSERT_TRUE(ApplyViewDelta(joined, &mine).ok());
  same_as_registry();
  ASSERT_TRUE(full_reader->Read(&full));  // without deltas: the whole view
  EXPECT_FALSE(full.delta());
  EXPECT_EQ(full.members_size(), 33);

  ASSERT_TRUE(clients[5]->Leave().ok());
  v1::View left;
  ASSERT_TRUE(reader->Read(&left));
  EXPECT_TRUE(left.delta());
  EXPECT_EQ(left.members_size(), 0);
  ASSERT_EQ(left.removed_size(), 1);
  EXPECT_EQ(left.removed(0).rank(), 5);
  ASSERT_TRUE(ApplyViewDelta(left, &mine).ok());
  same_as_registry();
  EXPECT_EQ(mine.members_size(), 32);

  // Out of step: refused, nothing changed.
  const std::string before = mine.SerializeAsString();
  EXPECT_EQ(ApplyViewDelta(joined, &mine).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(mine.SerializeAsString(), before);
  // WaitForView (which asks for deltas) still sees every change.
  ASSERT_TRUE(extra.Leave().ok());
  auto seen = clients[0]->WaitForView(
      "big", [](const v1::View& v) { return v.members_size() == 31; }, absl::Seconds(5));
  ASSERT_TRUE(seen.ok()) << seen.status();

  ctx.TryCancel();
  full_ctx.TryCancel();
  (void)reader->Finish();
  (void)full_reader->Finish();
  for (int r = 0; r < 32; ++r) {
    if (r != 5) {
      ASSERT_TRUE(clients[r]->Leave().ok());
    }
  }
  service.Stop();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

}  // namespace
}  // namespace tessel
