// One PeerGroup suite over every transport backend (in-process, UCX shared
// memory, UCX tcp): ranks are threads of this process, each with its own
// endpoint, as in transport/transport_conformance_test.cc.
#include "worker/peer_group.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/frame_auth.h"
#include "transport/transport_testing.h"
#include "worker/collectives.h"
#include "worker/peer_message.h"

namespace tessel {
namespace {

using ::testing::HasSubstr;

class PeerGroupTest : public ::testing::TestWithParam<TransportBackend> {
 protected:
  // n ranks of group `name`, connected to each other.
  std::vector<std::unique_ptr<PeerGroup>> MakeGroup(int n, absl::Duration timeout,
                                                    const std::string& name = "test.mesh") {
    if (!factory_) factory_ = GetParam().make();
    std::vector<std::unique_ptr<PeerGroup>> g;
    std::vector<std::string> addresses;
    for (int r = 0; r < n; ++r) {
      PeerGroupOptions o;
      o.name = name;
      o.timeout = timeout;
      o.describe = [](int rank) { return absl::StrCat("rank ", rank, " (test)"); };
      g.push_back(std::make_unique<PeerGroup>(factory_(), r, n, o));
      addresses.push_back(g.back()->address());
    }
    for (auto& p : g) EXPECT_TRUE(p->Connect(addresses).ok());
    return g;
  }
  TransportBackend::Factory factory_;
};

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(PeerGroupTest, DeliversTaggedMessagesWhicheverComesFirst) {
  auto g = MakeGroup(2, absl::Seconds(20));
  // Tag 7 is asked for before it is sent; 1..3 arrive before they are asked for.
  std::thread receiver([&] {
    auto v = g[1]->Recv(0, 7, "tag 7", 5);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, Iota(5, 70));
  });
  absl::SleepFor(absl::Milliseconds(50));
  for (uint64_t tag : {1, 2, 3}) ASSERT_TRUE(g[0]->Send(1, tag, Iota(tag, 10 * tag)).ok());
  ASSERT_TRUE(g[0]->Send(1, 7, Iota(5, 70)).ok());
  receiver.join();
  for (uint64_t tag : {3, 1, 2}) {
    auto v = g[1]->Recv(0, tag, absl::StrCat("tag ", tag));
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, Iota(tag, 10 * tag));
  }
  // Empty messages are messages too.
  ASSERT_TRUE(g[1]->Send(0, 9, {}).ok());
  auto empty = g[0]->Recv(1, 9, "empty", 0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  EXPECT_TRUE(g[0]->Flush().ok());
  EXPECT_TRUE(g[1]->Flush().ok());
}

TEST_P(PeerGroupTest, LargeMessageArrivesIntact) {
  auto g = MakeGroup(2, absl::Seconds(30));
  const std::vector<float> big = Iota(3u << 20, 0.5f);  // 12 MiB: UCX rendezvous
  ASSERT_TRUE(g[0]->Send(1, 1, big).ok());
  auto v = g[1]->Recv(0, 1, "big", static_cast<int64_t>(big.size()));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(BitwiseEqual(*v, big));
  EXPECT_TRUE(g[0]->Flush().ok());
}

TEST_P(PeerGroupTest, AllReduceSumsInRankOrderWithTheSameBitsEverywhere) {
  const int n = 4;
  auto g = MakeGroup(n, absl::Seconds(30));
  // Magnitudes far apart, so a different summation order gives other bits.
  std::mt19937 gen(11);
  const size_t len = 1000;
  std::vector<std::vector<float>> in(n, std::vector<float>(len));
  for (int r = 0; r < n; ++r) {
    for (float& e : in[r]) {
      const float scale = (gen() % 2) ? 1e8f : 1.0f;
      e = scale * (static_cast<float>(gen() % 2001) - 1000.0f) / 7.0f;
    }
  }
  std::vector<float> want = in[0];
  for (int r = 1; r < n; ++r) {
    for (size_t e = 0; e < len; ++e) want[e] += in[r][e];
  }
  std::vector<float> reversed = in[n - 1];
  for (int r = n - 2; r >= 0; --r) {
    for (size_t e = 0; e < len; ++e) reversed[e] += in[r][e];
  }
  ASSERT_FALSE(BitwiseEqual(want, reversed)) << "the data must make the order visible";

  for (int round = 0; round < 5; ++round) {
    std::vector<std::vector<float>> out = in;
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(n);
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        // Stagger the ranks so messages arrive in different orders each round.
        absl::SleepFor(absl::Milliseconds((r * 7 + round * 13) % 20));
        status[r] =
            AllReduceSum(*g[r], {0, 1, 2, 3}, 100 + round, absl::MakeSpan(out[r]), "test sum");
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_TRUE(BitwiseEqual(out[r], want)) << "rank " << r << " round " << round;
    }
  }
}

TEST_P(PeerGroupTest, DisjointSubgroupsReduceIndependentlyUnderOneTag) {
  auto g = MakeGroup(4, absl::Seconds(20));
  std::vector<std::vector<float>> data = {{1, 2}, {10, 20}, {100, 200}, {1000, 2000}};
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(4);
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int> members = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
      status[r] = AllReduceSum(*g[r], members, 5, absl::MakeSpan(data[r]), "subgroup sum");
      if (status[r].ok()) status[r] = Barrier(*g[r], {0, 1, 2, 3}, 6, "barrier");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  EXPECT_EQ(data[0], (std::vector<float>{101, 202}));
  EXPECT_EQ(data[2], (std::vector<float>{101, 202}));
  EXPECT_EQ(data[1], (std::vector<float>{1010, 2020}));
  EXPECT_EQ(data[3], (std::vector<float>{1010, 2020}));
}

TEST_P(PeerGroupTest, WaitsHaveADeadlineThatNamesPeerAndWhat) {
  auto g = MakeGroup(2, absl::Milliseconds(300));
  const absl::Time start = absl::Now();
  auto v = g[0]->Recv(1, 42, "activation of step 3 micro-batch 2 from stage 0");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string msg(v.status().message());
  EXPECT_THAT(msg, HasSubstr("activation of step 3 micro-batch 2 from stage 0"));
  EXPECT_THAT(msg, HasSubstr("from rank 1 (test)"));
  EXPECT_THAT(msg, HasSubstr("group 'test.mesh' rank 0 (test)"));

  std::vector<float> data = {1};
  absl::Status s = AllReduceSum(*g[0], {0, 1}, 3, absl::MakeSpan(data), "sum of fc1 forward");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("sum of fc1 forward"));
}

TEST_P(PeerGroupTest, AbortWakesWaiters) {
  auto g = MakeGroup(2, absl::Seconds(60));
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    g[0]->Abort(absl::UnavailableError("peer 1 is dead"));
  });
  auto v = g[0]->Recv(1, 1, "anything");
  aborter.join();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("peer 1 is dead"));
}

TEST_P(PeerGroupTest, AFailingHealthCheckEndsWaitsLongBeforeTheDeadline) {
  auto g = MakeGroup(2, absl::Seconds(60));
  std::atomic<int> calls{0};
  g[0]->SetHealthCheck([&calls]() -> absl::Status {
    if (++calls < 3) return absl::OkStatus();
    return absl::AbortedError("rank 1 (test) left the mesh");
  });
  const absl::Time start = absl::Now();
  std::vector<float> data = {1};
  absl::Status s = AllReduceSum(*g[0], {0, 1}, 1, absl::MakeSpan(data), "a sum");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1 (test) left the mesh"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("a sum"));
  EXPECT_GE(calls.load(), 3);
  EXPECT_EQ(g[0]->Send(1, 2, {5}).code(), absl::StatusCode::kAborted);  // failed for good
}

TEST_P(PeerGroupTest, APassingHealthCheckLeavesWaitsAlone) {
  auto g = MakeGroup(2, absl::Seconds(20));
  std::atomic<int> calls{0};
  g[1]->SetHealthCheck([&calls] {
    ++calls;
    return absl::OkStatus();
  });
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(700));  // a few health periods
    EXPECT_TRUE(g[0]->Send(1, 3, {7}).ok());
  });
  auto v = g[1]->Recv(0, 3, "a late message", 1);
  sender.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0], 7.0f);
  EXPECT_GE(calls.load(), 1);
  g[1]->SetHealthCheck(nullptr);
  EXPECT_TRUE(g[0]->Flush().ok());
}

TEST_P(PeerGroupTest, ResetStartsAGenerationThatNeverSeesTheAbandonedOne) {
  auto g = MakeGroup(2, absl::Milliseconds(300));
  // An abandoned attempt: rank 0 sent tag 5, and rank 1's wait failed.
  ASSERT_TRUE(g[0]->Send(1, 5, {1, 2, 3}).ok());
  ASSERT_TRUE(g[0]->Flush().ok());
  g[1]->Abort(absl::AbortedError("a shard server died"));
  EXPECT_EQ(g[1]->Recv(0, 6, "anything").status().code(), absl::StatusCode::kAborted);
  // Rank 0 resets first and sends generation 1's tag 5 before rank 1 resets:
  // kept. The old tag 5 is dropped, and the failure is cleared.
  g[0]->Reset({0, 1});
  EXPECT_EQ(g[0]->generation(), (PeerGeneration{0, 1}));
  ASSERT_TRUE(g[0]->Send(1, 5, {7, 8}).ok());
  ASSERT_TRUE(g[0]->Flush().ok());
  g[1]->Reset({0, 1});
  auto v = g[1]->Recv(0, 5, "the rerun's tag 5", 2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<float>{7, 8}));
  // Nothing else is waiting: the old message is gone, not queued behind it.
  EXPECT_EQ(g[1]->Recv(0, 5, "a second tag 5").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // A straggler of generation 0 arriving now is dropped too; going back is a no-op.
  g[0]->Reset({});
  EXPECT_EQ(g[0]->generation(), (PeerGeneration{0, 1}));
  // A later epoch outranks any round of an earlier one.
  g[0]->Reset({1, 0});
  EXPECT_EQ(g[0]->generation(), (PeerGeneration{1, 0}));
  g[0]->Reset({0, 7});
  EXPECT_EQ(g[0]->generation(), (PeerGeneration{1, 0}));
}

// A rank whose receive queue was wedged renews its endpoint (a hybrid
// recovery does): it gets a new address, and once its peers connect to that
// (UpdateAddresses, after the next Reset) messages flow both ways again. A
// send to the abandoned address belongs to the older generation: it neither
// holds up a Flush of the new one nor fails it.
TEST_P(PeerGroupTest, ARenewedEndpointTakesMessagesAtItsNewAddress) {
  auto g = MakeGroup(3, absl::Seconds(10));
  ASSERT_TRUE(g[0]->Send(1, 1, {1}).ok());
  ASSERT_TRUE(g[1]->Recv(0, 1, "tag 1", 1).ok());
  const std::string old_address = g[1]->address();
  absl::Status renewed = g[1]->RenewEndpoint();
  if (absl::IsUnimplemented(renewed)) GTEST_SKIP() << renewed;
  ASSERT_TRUE(renewed.ok()) << renewed;
  EXPECT_NE(g[1]->address(), old_address);
  EXPECT_EQ(g[1]->addresses()[1], g[1]->address());
  // Rank 0 still sends to the old address: lost, and perhaps never finished.
  ASSERT_TRUE(g[0]->Send(1, 2, {2}).ok());
  const PeerGeneration next{7, 0};
  std::vector<std::string> addresses = g[0]->addresses();
  addresses[1] = g[1]->address();
  for (auto& p : g) {
    p->Reset(next);
    p->UpdateAddresses(addresses);
  }
  EXPECT_TRUE(g[0]->Flush().ok());
  ASSERT_TRUE(g[0]->Send(1, 3, {3, 3}).ok());
  ASSERT_TRUE(g[2]->Send(1, 3, {4}).ok());
  ASSERT_TRUE(g[1]->Send(0, 4, {5}).ok());
  ASSERT_TRUE(g[1]->Send(2, 4, {6}).ok());
  auto from0 = g[1]->Recv(0, 3, "tag 3 from rank 0", 2);
  auto from2 = g[1]->Recv(2, 3, "tag 3 from rank 2", 1);
  auto at0 = g[0]->Recv(1, 4, "tag 4 at rank 0", 1);
  auto at2 = g[2]->Recv(1, 4, "tag 4 at rank 2", 1);
  ASSERT_TRUE(from0.ok()) << from0.status();
  ASSERT_TRUE(from2.ok()) << from2.status();
  ASSERT_TRUE(at0.ok()) << at0.status();
  ASSERT_TRUE(at2.ok()) << at2.status();
  EXPECT_EQ(*from0, (std::vector<float>{3, 3}));
  EXPECT_EQ(*at2, (std::vector<float>{6}));
  for (auto& p : g) EXPECT_TRUE(p->Flush().ok());
  // The lost tag 2 is not waiting at the new address.
  EXPECT_EQ(g[1]->RecvAny(2, absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Of several messages with one tag, RecvAny takes the newest generation's: a
// newcomer welcomed in several recovery rounds acts on the last.
TEST_P(PeerGroupTest, RecvAnyTakesTheNewestGeneration) {
  auto g = MakeGroup(2, absl::Seconds(10));
  g[0]->Reset({5, 0});
  ASSERT_TRUE(g[0]->SendBytes(1, 9, "round 0").ok());
  g[0]->Reset({5, 1});
  ASSERT_TRUE(g[0]->SendBytes(1, 9, "round 1").ok());
  ASSERT_TRUE(g[0]->Flush().ok());
  for (int i = 0; i < 200; ++i) {
    auto m = g[1]->RecvAny(9, absl::Seconds(5));
    ASSERT_TRUE(m.ok()) << m.status();
    if (m->generation == PeerGeneration{5, 1}) {
      EXPECT_EQ(m->bytes, "round 1");
      return;
    }
    // Round 1's had not landed yet: round 0's came first.
    EXPECT_EQ(m->bytes, "round 0");
  }
  FAIL() << "round 1's message never came";
}
TEST_P(PeerGroupTest, FailuresKeepTheirPayloadsThroughWaits) {
  auto g = MakeGroup(2, absl::Seconds(60));
  absl::Status why = absl::AbortedError("a shard server was restarted");
  why.SetPayload("type.tessel.dev/recoverable", absl::Cord("1"));
  g[0]->Abort(why);
  absl::Status s = g[0]->Recv(1, 1, "anything").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(s.GetPayload("type.tessel.dev/recoverable").has_value());
}

TEST_P(PeerGroupTest, RefusesMessagesOfAnotherGroupAndBadArguments) {
  if (!factory_) factory_ = GetParam().make();
  PeerGroupOptions a_opt, b_opt;
  a_opt.name = "job-a.mesh";
  b_opt.name = "job-b.mesh";
  a_opt.timeout = b_opt.timeout = absl::Milliseconds(300);
  PeerGroup a(factory_(), 0, 2, a_opt);
  PeerGroup b(factory_(), 1, 2, b_opt);
  const std::vector<std::string> addresses = {a.address(), b.address()};
  ASSERT_TRUE(a.Connect(addresses).ok());
  ASSERT_TRUE(b.Connect(addresses).ok());
  ASSERT_TRUE(b.Send(0, 1, {1, 2, 3}).ok());
  auto v = a.Recv(1, 1, "a message of this group");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);

  EXPECT_EQ(a.Send(0, 1, {}).code(), absl::StatusCode::kInvalidArgument);  // to itself
  EXPECT_EQ(a.Send(2, 1, {}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> data = {1};
  EXPECT_EQ(AllReduceSum(a, {1, 0}, 1, absl::MakeSpan(data), "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllReduceSum(a, {1}, 1, absl::MakeSpan(data), "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(AllReduceSum(a, {0}, 1, absl::MakeSpan(data), "x").ok());
}

// Issue 42: a message's buffer is allocated when it arrives, before anyone
// asks for it, so a peer cannot make a rank allocate more than the options
// allow: one message above max_message_bytes, or one that would take the
// unclaimed bytes above max_inbox_bytes, is refused (and counted); claiming
// a message makes room again.
TEST_P(PeerGroupTest, MessagesBeyondTheBoundsAreRefusedBeforeAnyAllocation) {
  if (!factory_) factory_ = GetParam().make();
  PeerGroupOptions o;
  o.name = "bounded.mesh";
  o.timeout = absl::Milliseconds(300);
  o.max_message_bytes = 1024;
  o.max_inbox_bytes = 2048;
  PeerGroup a(factory_(), 0, 2, o);
  PeerGroup b(factory_(), 1, 2, o);
  const std::vector<std::string> addresses = {a.address(), b.address()};
  ASSERT_TRUE(a.Connect(addresses).ok());
  ASSERT_TRUE(b.Connect(addresses).ok());
  ASSERT_TRUE(b.Send(0, 1, Iota(257, 0)).ok());  // 1028 bytes: over the message bound
  EXPECT_EQ(a.Recv(1, 1, "too large").status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a.refused_oversized(), 1);
  ASSERT_TRUE(b.Send(0, 2, Iota(256, 0)).ok());  // 1024 bytes each: two fit unclaimed
  ASSERT_TRUE(b.Send(0, 3, Iota(256, 1)).ok());
  ASSERT_TRUE(b.Flush().ok());
  ASSERT_TRUE(b.Send(0, 4, Iota(1, 2)).ok());  // a third does not
  EXPECT_EQ(a.Recv(1, 4, "over the inbox bound").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(a.refused_oversized(), 2);
  auto two = a.Recv(1, 2, "tag 2", 256);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(*two, Iota(256, 0));
  ASSERT_TRUE(b.Send(0, 5, Iota(1, 3)).ok());  // room again
  auto five = a.Recv(1, 5, "tag 5", 1);
  ASSERT_TRUE(five.ok()) << five.status();
  EXPECT_EQ(a.refused_oversized(), 2);
}

// Authenticated groups (a hybrid mesh with its key): a process that knows
// the group's name and a member's address but not the key cannot get a
// message taken, whether it sends no tag, a tag under another job's key, or
// a message of an older generation re-stamped with the current one; the
// real sender's message under the same (peer, tag) is still taken.
TEST_P(PeerGroupTest, AnAuthenticatedGroupTakesOnlyMessagesTaggedWithItsKey) {
  auto g = MakeGroup(2, absl::Seconds(60));
  const std::string secret = NewJobSecret();
  for (auto& p : g) p->SetAuth(*FrameAuth::Create(secret, JobId("test.mesh"), -1));
  for (auto& p : g) p->Reset({0, 1});
  EXPECT_TRUE(g[1]->authenticated());

  std::unique_ptr<Transport> forger = factory_();
  absl::StatusOr<PeerId> to = forger->Connect(g[1]->address());
  ASSERT_TRUE(to.ok()) << to.status();
  std::atomic<int> sent{0};
  const std::vector<float> fake = {666, 666};
  auto send = [&](std::vector<uint8_t> header) {
    forger->Send(*to, header, fake.data(), fake.size() * sizeof(float),
                 [&sent](absl::Status) { ++sent; });
  };
  PeerMessageHeader h;
  h.group_id = 0;
  {  // the group id is FNV-1a of the name, as a forger reading the code computes it
    uint64_t id = 1469598103934665603ull;
    for (unsigned char c : std::string("test.mesh")) id = (id ^ c) * 1099511628211ull;
    h.group_id = id;
  }
  h.from = 0;
  h.generation = {0, 1};
  h.tag = 9;
  h.payload_bytes = fake.size() * sizeof(float);
  send(EncodePeerHeader(h));  // no tag
  auto other_job = *FrameAuth::Create(NewJobSecret(), JobId("test.mesh"), -1);
  std::vector<uint8_t> wrong_key = EncodePeerHeader(h);
  auto tag = other_job->TagOf(wrong_key, 0);
  wrong_key.insert(wrong_key.end(), tag.begin(), tag.end());
  send(wrong_key);  // a tag under another job's key
  // A generation-{0, 0} message as a member sent it (right key), re-stamped
  // with round 1 by someone without the key.
  auto real_key = *FrameAuth::Create(secret, JobId("test.mesh"), -1);
  PeerMessageHeader old = h;
  old.generation = {};
  tag = real_key->TagOf(EncodePeerHeader(old), 0);
  std::vector<uint8_t> restamped = EncodePeerHeader(h);
  restamped.insert(restamped.end(), tag.begin(), tag.end());
  send(restamped);
  for (int i = 0; i < 500 && (sent < 3 || g[1]->refused_unauthenticated() < 3); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(g[1]->refused_unauthenticated(), 3);

  ASSERT_TRUE(g[0]->Send(1, 9, {1, 2}).ok());
  auto v = g[1]->Recv(0, 9, "the real rank 0's message", 2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<float>{1, 2}));
  EXPECT_EQ(g[0]->refused_unauthenticated(), 0);
  forger->Shutdown();
}

// A member without the key is not heard by keyed ones, and a keyed member's
// tags are ignored by an unkeyed one (a group is keyed whole or not at all).
TEST_P(PeerGroupTest, KeyedAndUnkeyedMembersDoNotMix) {
  auto g = MakeGroup(2, absl::Milliseconds(300));
  g[1]->SetAuth(*FrameAuth::Create(NewJobSecret(), JobId("test.mesh"), -1));
  ASSERT_TRUE(g[0]->Send(1, 1, {1}).ok());
  EXPECT_EQ(g[1]->Recv(0, 1, "an untagged message").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(g[1]->refused_unauthenticated(), 1);
  ASSERT_TRUE(g[1]->Send(0, 2, {2}).ok());
  auto v = g[0]->Recv(1, 2, "a tagged message", 1);
  ASSERT_TRUE(v.ok()) << v.status();
  g[1]->SetAuth(nullptr);
  EXPECT_FALSE(g[1]->authenticated());
}

TEST_P(PeerGroupTest, BytesTravelExactlyAndFloatReceiversCheckTheirSize) {
  auto g = MakeGroup(2, absl::Seconds(60));
  std::string bytes(1001, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(g[0]->SendBytes(1, 1, bytes).ok());
  ASSERT_TRUE(g[0]->SendBytes(1, 2, "").ok());
  ASSERT_TRUE(g[0]->SendBytes(1, 3, "abc").ok());
  auto got = g[1]->RecvBytes(0, 1, "bytes");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  auto empty = g[1]->RecvBytes(0, 2, "nothing");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  // Three bytes are not floats: a float receiver refuses them, naming them.
  auto floats = g[1]->Recv(0, 3, "three bytes as floats");
  EXPECT_EQ(floats.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(floats.status().message()), ::testing::HasSubstr("has 3 bytes"));
}

TEST_P(PeerGroupTest, AllGatherAndBroadcastCarryBytesToEveryMember) {
  constexpr int kSize = 3;
  auto g = MakeGroup(kSize, absl::Seconds(60));
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> gathered(kSize);
  std::vector<std::string> broadcast(kSize);
  std::vector<absl::Status> status(kSize);
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<int> all = {0, 1, 2};
      // Different lengths per rank: all-gather carries each as it is.
      auto out = AllGather(*g[r], all, 10, std::string(static_cast<size_t>(r) * 5, 'a' + r),
                           "the test gather");
      if (!out.ok()) {
        status[r] = out.status();
        return;
      }
      gathered[r] = std::move(*out);
      broadcast[r] = r == 2 ? std::string("from rank 2\0with a zero", 24) : std::string();
      status[r] = Broadcast(*g[r], all, 2, 11, &broadcast[r], "the test broadcast");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    ASSERT_EQ(gathered[r].size(), 3u);
    for (int from = 0; from < kSize; ++from) {
      EXPECT_EQ(gathered[r][from], std::string(static_cast<size_t>(from) * 5, 'a' + from));
    }
    EXPECT_EQ(broadcast[r], std::string("from rank 2\0with a zero", 24));
  }
  EXPECT_EQ(Broadcast(*g[0], {0, 1}, 2, 12, &broadcast[0], "x").code(),
            absl::StatusCode::kInvalidArgument);  // the root is not a member
}

INSTANTIATE_TEST_SUITE_P(Backends, PeerGroupTest,
                         ::testing::Values(InProcBackend(), UcxBackend("posix,sysv,self"),
                                           UcxBackend("tcp")),
                         TransportBackendName);

}  // namespace
}  // namespace tessel
