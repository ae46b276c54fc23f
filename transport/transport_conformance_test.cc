// One suite, every backend: the in-process transport and UCX (two endpoints in
// this process, talking through UCX's own shared-memory or tcp transports).
#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "transport/transport_testing.h"
#include "transport/ucx/ucx_testing.h"

namespace tessel {
namespace {

class TransportConformanceTest : public ::testing::TestWithParam<TransportBackend> {
 protected:
  void SetUp() override {
    TransportBackend::Factory f = GetParam().make();
    a_ = f();
    b_ = f();
    c_ = f();
  }
  void TearDown() override {
    c_->Shutdown();
    b_->Shutdown();
    a_->Shutdown();
  }
  std::unique_ptr<Transport> a_, b_, c_;
};

std::vector<uint8_t> Header(uint8_t tag, size_t n = 64) {
  std::vector<uint8_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<uint8_t>(tag + i);
  return h;
}

// Lands every payload (of `bytes`) at `dst` and notifies `received`; `from`
// (optional) gets the sender.
void LandAt(Transport* t, void* dst, size_t bytes, absl::Notification* received,
            std::atomic<PeerId>* from = nullptr) {
  t->SetHandler([=](const Incoming& in) {
    if (from != nullptr) *from = in.from;
    EXPECT_EQ(in.payload_bytes, bytes);
    return Accept{dst, bytes, [received](absl::Status s) {
                    EXPECT_TRUE(s.ok()) << s;
                    received->Notify();
                  }};
  });
}

TEST_P(TransportConformanceTest, DeliversHeaderAndPayloadAndRepliesToSender) {
  std::vector<float> inbox(100, 0.f);
  absl::Notification got_request, got_reply, send_done;
  std::vector<uint8_t> seen_header;
  float reply_value = 42.f;
  b_->SetHandler([&](const Incoming& in) {
    seen_header.assign(in.header.begin(), in.header.end());
    EXPECT_EQ(in.payload_bytes, inbox.size() * sizeof(float));
    PeerId from = in.from;
    return Accept{inbox.data(), inbox.size() * sizeof(float), [&, from](absl::Status s) {
                    EXPECT_TRUE(s.ok()) << s;
                    got_request.Notify();
                    std::vector<uint8_t> h = Header(9, 16);
                    b_->Send(from, absl::MakeConstSpan(h), &reply_value, sizeof(float),
                             [](absl::Status s) { EXPECT_TRUE(s.ok()) << s; });
                  }};
  });
  float reply = 0;
  a_->SetHandler([&](const Incoming& in) {
    EXPECT_EQ(in.header.size(), 16u);
    return Accept{&reply, sizeof(reply), [&](absl::Status s) { got_reply.Notify(); }};
  });
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::vector<float> out(100);
  std::iota(out.begin(), out.end(), 1.f);
  std::vector<uint8_t> h = Header(3);
  a_->Send(*peer, absl::MakeConstSpan(h), out.data(), out.size() * sizeof(float),
           [&](absl::Status s) {
             EXPECT_TRUE(s.ok()) << s;
             send_done.Notify();
           });
  ASSERT_TRUE(got_request.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(got_reply.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(send_done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(seen_header, h);
  EXPECT_EQ(inbox, out);
  EXPECT_EQ(reply, 42.f);
}

TEST_P(TransportConformanceTest, LargePayloadLandsIntactInChosenBuffer) {
  const size_t n = 8u << 20;  // 32 MiB of floats: rendezvous in UCX
  std::vector<float> src(n), dst(n + 2, -1.f);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 9973) * 0.5f;
  absl::Notification received;
  LandAt(b_.get(), dst.data() + 1, n * sizeof(float), &received);
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  std::vector<uint8_t> h = Header(1);
  absl::Notification sent;  // src must outlive the send, not just the receive
  a_->Send(*peer, absl::MakeConstSpan(h), src.data(), n * sizeof(float),
           [&](absl::Status) { sent.Notify(); });
  ASSERT_TRUE(received.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(dst.front(), -1.f);
  EXPECT_EQ(dst.back(), -1.f);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 1));
}

TEST_P(TransportConformanceTest, RefusedPayloadCompletesSenderAndLeavesReceiverUsable) {
  std::atomic<int> refused{0}, accepted{0};
  std::vector<float> sink(1 << 20, 0.f);
  absl::Notification second;
  b_->SetHandler([&](const Incoming& in) {
    if (in.header[0] == 0xEE) {
      refused++;
      return Accept{};
    }
    return Accept{sink.data(), sink.size() * sizeof(float), [&](absl::Status s) {
                    accepted++;
                    second.Notify();
                  }};
  });
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  for (size_t bytes : {size_t{16}, sink.size() * sizeof(float)}) {
    std::vector<float> data(bytes / sizeof(float), 3.f);
    absl::Notification done;
    std::vector<uint8_t> bad(64, 0xEE);
    a_->Send(*peer, absl::MakeConstSpan(bad), data.data(), bytes,
             [&](absl::Status) { done.Notify(); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20))) << bytes;
  }
  EXPECT_EQ(refused.load(), 2);
  EXPECT_EQ(sink[0], 0.f);
  std::vector<float> good(16, 7.f);
  std::vector<uint8_t> h = Header(1);
  // The payload must outlive the send (the Transport contract): the receiver
  // can have it before the sender's sendmsg returns.
  absl::Notification sent;
  a_->Send(*peer, absl::MakeConstSpan(h), good.data(), good.size() * sizeof(float),
           [&](absl::Status) { sent.Notify(); });
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(accepted.load(), 1);
  EXPECT_EQ(sink[15], 7.f);
}

TEST_P(TransportConformanceTest, ManyConcurrentSendersAllArrive) {
  constexpr int kPerSender = 200;
  absl::Mutex mu;
  std::vector<int> count(2, 0);
  std::vector<uint32_t> slots(2 * kPerSender, 0);
  absl::Notification all;
  int total = 0;
  b_->SetHandler([&](const Incoming& in) {
    int sender = in.header[0];
    int index = in.header[1] | (in.header[2] << 8);
    return Accept{&slots[sender * kPerSender + index], sizeof(uint32_t),
                  [&, sender](absl::Status s) {
                    bool last;
                    {
                      absl::MutexLock lock(&mu);
                      count[sender]++;
                      last = ++total == 2 * kPerSender;
                    }
                    if (last) all.Notify();
                  }};
  });
  auto from_a = a_->Connect(b_->address());
  auto from_c = c_->Connect(b_->address());
  ASSERT_TRUE(from_a.ok() && from_c.ok());
  std::vector<uint32_t> values(2 * kPerSender);
  std::atomic<int> sends_done{0};  // values must outlive every send
  for (int i = 0; i < 2 * kPerSender; ++i) values[i] = 1000 + i;
  auto blast = [&](Transport* t, PeerId peer, int sender) {
    for (int i = 0; i < kPerSender; ++i) {
      std::vector<uint8_t> h = {static_cast<uint8_t>(sender), static_cast<uint8_t>(i & 0xff),
                                static_cast<uint8_t>(i >> 8)};
      t->Send(peer, absl::MakeConstSpan(h), &values[sender * kPerSender + i], sizeof(uint32_t),
              [&](absl::Status) { ++sends_done; });
    }
  };
  std::thread ta([&] { blast(a_.get(), *from_a, 0); });
  std::thread tc([&] { blast(c_.get(), *from_c, 1); });
  ta.join();
  tc.join();
  ASSERT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(slots, values);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (sends_done.load() < 2 * kPerSender && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(sends_done.load(), 2 * kPerSender);
}

TEST_P(TransportConformanceTest, ConnectToUnknownAddressFails) {
  if (GetParam().name.rfind("ucx", 0) == 0) GTEST_SKIP() << "UCX validates addresses lazily";
  EXPECT_FALSE(a_->Connect("no-such-endpoint").ok());
}

TEST_P(TransportConformanceTest, SendAfterShutdownIsCancelledNotLost) {
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  a_->Shutdown();
  absl::Notification done;
  absl::Status result;
  float x = 1;
  std::vector<uint8_t> h = Header(1);
  a_->Send(*peer, absl::MakeConstSpan(h), &x, sizeof(x), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  if (GetParam().name == "inproc") GTEST_SKIP() << "in-process sends after shutdown are dropped";
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_FALSE(result.ok());
}

TEST_P(TransportConformanceTest, HealthyReceiveQueuePassesTheProbe) {
  EXPECT_TRUE(a_->CheckReceiveQueue(absl::Seconds(10)).ok());
  EXPECT_TRUE(a_->CheckReceiveQueue(absl::Seconds(10)).ok());  // and again
}

// Reset: a fresh endpoint at a new address; what was connected before fails,
// the handler stays, and peers that connect to the new address get through
// and are answered.
TEST_P(TransportConformanceTest, ResetGivesAFreshAddressAndFailsOldPeers) {
  const std::string before = b_->address();
  auto to_c = b_->Connect(c_->address());
  ASSERT_TRUE(to_c.ok());
  absl::Mutex mu;
  int received = 0;
  PeerId last_from = 0;
  b_->SetHandler([&](const Incoming& in) {
    absl::MutexLock lock(&mu);
    ++received;
    last_from = in.from;
    return Accept{};
  });
  absl::Status reset = b_->Reset();
  if (absl::IsUnimplemented(reset)) GTEST_SKIP() << reset;
  ASSERT_TRUE(reset.ok()) << reset;
  EXPECT_NE(b_->address(), before);
  EXPECT_TRUE(b_->CheckReceiveQueue(absl::Seconds(10)).ok());

  std::vector<uint8_t> h = Header(7, 16);
  absl::Notification failed;
  absl::Status old_send;
  b_->Send(*to_c, absl::MakeConstSpan(h), nullptr, 0, [&](absl::Status s) {
    old_send = s;
    failed.Notify();
  });
  ASSERT_TRUE(failed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(old_send.code(), absl::StatusCode::kUnavailable) << old_send;

  auto to_b = a_->Connect(b_->address());
  ASSERT_TRUE(to_b.ok());
  absl::Notification sent;
  a_->Send(*to_b, absl::MakeConstSpan(h), nullptr, 0, [&](absl::Status) { sent.Notify(); });
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(10)));
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(
                                        +[](int* n) { return *n == 1; }, &received),
                                    absl::Seconds(10)));
  }
  // b answers a through the reply endpoint of a's message.
  std::atomic<int> replies{0};
  a_->SetHandler([&](const Incoming&) {
    ++replies;
    return Accept{};
  });
  PeerId reply_to;
  {
    absl::MutexLock lock(&mu);
    reply_to = last_from;
  }
  absl::Notification answered;
  b_->Send(reply_to, absl::MakeConstSpan(h), nullptr, 0, [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    answered.Notify();
  });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  for (int i = 0; i < 1000 && replies.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(replies.load(), 1);
}

// Payload memory: a payload inside it reaches the receiver without a copy
// through the transport's queues where the receiver can map it (in
// process, UCX shared memory), through them otherwise (UCX over tcp); what
// lands in dst is the payload either way, and the path is reported.
TEST_P(TransportConformanceTest, PayloadMemoryPayloadLandsIntactAndSaysHowItMoved) {
  std::shared_ptr<PayloadMemory> memory = a_->payload_memory();
  ASSERT_NE(memory, nullptr);
  const size_t n = 1u << 20;  // 4 MiB of floats
  auto* src = static_cast<float*>(memory->Allocate(n * sizeof(float)));
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(src[n - 1], 0.f);  // zeroed
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 7919) * 0.25f;
  const size_t part = n / 2;  // sent from an offset inside the region
  std::vector<float> dst(part + 2, -1.f);
  absl::Notification received, sent;
  std::atomic<PeerId> from{0};
  LandAt(b_.get(), dst.data() + 1, part * sizeof(float), &received, &from);
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  std::vector<uint8_t> h = Header(3);
  a_->Send(*peer, absl::MakeConstSpan(h), src + 1000, part * sizeof(float), [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    sent.Notify();
  });
  ASSERT_TRUE(received.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(std::equal(src + 1000, src + 1000 + part, dst.begin() + 1));
  EXPECT_EQ(dst.front(), -1.f);
  EXPECT_EQ(dst.back(), -1.f);
  // Without shared memory the payload goes by UCX's rendezvous, RMA over
  // cma (get) or tcp (put).
  const std::string& name = GetParam().name;
  const std::string path =
      name.find("cma") != std::string::npos   ? "copied (rendezvous by RMA over " + CmaOrTcp() + ")"
      : name.find("tcp") != std::string::npos ? "copied (rendezvous by RMA over tcp)"
                                              : "in place";
  EXPECT_EQ(b_->PayloadPath(from.load()), path) << name;
  EXPECT_EQ(a_->PayloadPath(*peer), path) << name;
  EXPECT_TRUE(memory->Free(src));
  int not_ours = 0;
  EXPECT_FALSE(memory->Free(&not_ours));
}

// Borrows every in-place payload that reaches `t` (remembering the last
// one's sender and lease); a payload not in place gets `otherwise` (where it
// lands, or a refusal).
class Borrower {
 public:
  Borrower(Transport* t, std::function<Accept()> otherwise) {
    t->SetHandler([this, otherwise = std::move(otherwise)](const Incoming& in) {
      absl::MutexLock lock(&mu_);
      from_ = in.from;
      lease_ = in.lease;
      if (in.in_place == nullptr) return otherwise();
      borrowed_ = static_cast<const float*>(in.in_place);
      Accept a;
      a.borrow = true;
      return a;
    });
  }
  // Waits up to 10 s for a borrow, or until `gave_up` holds: the borrowed
  // payload, or null.
  const float* Wait(const std::function<bool()>& gave_up) {
    for (int i = 0; i < 2000; ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (borrowed_ != nullptr) return borrowed_;
      }
      if (gave_up()) break;
      absl::SleepFor(absl::Milliseconds(5));
    }
    absl::MutexLock lock(&mu_);
    return borrowed_;
  }
  PeerId from() {
    absl::MutexLock lock(&mu_);
    return from_;
  }
  uint64_t lease() {
    absl::MutexLock lock(&mu_);
    return lease_;
  }

 private:
  absl::Mutex mu_;
  const float* borrowed_ ABSL_GUARDED_BY(mu_) = nullptr;
  PeerId from_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
};

// A borrowed payload is read where the sender keeps it after the handler
// returned; the sender's send completes only once the receiver releases it.
TEST_P(TransportConformanceTest, BorrowedPayloadStaysTheSendersUntilReleased) {
  std::shared_ptr<PayloadMemory> memory = a_->payload_memory();
  const size_t n = 256u << 10;  // 1 MiB of floats
  auto* src = static_cast<float*>(memory->Allocate(n * sizeof(float)));
  ASSERT_NE(src, nullptr);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i) + 0.5f;
  std::vector<float> fallback(n, 0.f);
  absl::Notification copied;
  // Not mappable here (tcp): sent through the queues, into `fallback`.
  Borrower borrower(b_.get(), [&] {
    return Accept{fallback.data(), n * sizeof(float), [&](absl::Status) { copied.Notify(); }};
  });
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  std::atomic<bool> done{false};
  std::vector<uint8_t> h = Header(4);
  a_->Send(*peer, absl::MakeConstSpan(h), src, n * sizeof(float), [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    done = true;
  });
  const float* borrowed = borrower.Wait([&] { return copied.HasBeenNotified(); });
  if (copied.HasBeenNotified()) {
    // Waiting (not only HasBeenNotified, inline and unseen by TSan's view of
    // Debian's Abseil) orders the receive's writes before these reads.
    copied.WaitForNotification();
    EXPECT_TRUE(std::equal(src, src + n, fallback.begin()));
    for (int i = 0; i < 2000 && !done.load(); ++i) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_TRUE(done.load());
    GTEST_SKIP() << GetParam().name << ": not mappable in place here; copied instead";
  }
  ASSERT_NE(borrowed, nullptr) << GetParam().name;
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(done.load()) << "the send completed while the payload was borrowed";
  EXPECT_TRUE(std::equal(src, src + n, borrowed));
  b_->Release(borrower.from(), borrower.lease());
  for (int i = 0; i < 2000 && !done.load(); ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(done.load());
  b_->Release(borrower.from(), borrower.lease());  // a second release is harmless
  EXPECT_EQ(b_->PayloadPath(borrower.from()), "in place");
  memory->Free(src);
}

// A borrow outlives a Reset of the receiver (its mapping is kept until the
// release) and the sender's send ends when the sender shuts down.
TEST_P(TransportConformanceTest, BorrowSurvivesReceiverResetAndSenderShutdownEndsTheSend) {
  std::shared_ptr<PayloadMemory> memory = a_->payload_memory();
  const size_t n = 64u << 10;
  auto* src = static_cast<float*>(memory->Allocate(n * sizeof(float)));
  ASSERT_NE(src, nullptr);
  for (size_t i = 0; i < n; ++i) src[i] = 3.f;
  Borrower borrower(b_.get(), [] { return Accept{}; });  // not in place: refused
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  absl::Notification done;
  absl::Status result;
  std::vector<uint8_t> h = Header(5);
  a_->Send(*peer, absl::MakeConstSpan(h), src, n * sizeof(float), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  const float* borrowed = borrower.Wait([&] { return done.HasBeenNotified(); });
  if (borrowed == nullptr) GTEST_SKIP() << GetParam().name << ": not mappable in place here";
  absl::Status reset = b_->Reset();
  const bool can_reset = !absl::IsUnimplemented(reset);
  if (can_reset) {
    ASSERT_TRUE(reset.ok()) << reset;
  }
  EXPECT_EQ(borrowed[n - 1], 3.f);  // still mapped
  b_->Release(borrower.from(), borrower.lease());
  // After a reset the release cannot reach the sender; its shutdown ends it.
  if (can_reset) a_->Shutdown();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  memory->Free(src);  // after the transport shut down
}

// Issue 42: a transport never writes more than Accept::capacity at dst, even
// when the handler chose dst without checking the size: the payload is
// dropped (nothing written) and `done` runs with OutOfRange. Eager, rendezvous
// and payload-memory (descriptor) payloads alike.
TEST_P(TransportConformanceTest, APayloadLargerThanItsCapacityIsDroppedNotWritten) {
  std::shared_ptr<PayloadMemory> memory = a_->payload_memory();
  const size_t large = 4u << 20;
  auto* shared = static_cast<uint8_t*>(memory != nullptr ? memory->Allocate(large) : nullptr);
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  struct Case {
    size_t bytes;
    const uint8_t* from;
  };
  std::vector<uint8_t> ordinary(large, 0x5a);
  std::vector<Case> cases = {{64, ordinary.data()}, {large, ordinary.data()}};
  if (shared != nullptr) {
    std::fill(shared, shared + large, 0x5a);
    cases.push_back({large, shared});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bytes);
    // Room for half the payload; the upper half is a guard that must stay.
    std::vector<uint8_t> dst(c.bytes, 0);
    absl::Notification landed;
    absl::Status outcome;
    b_->SetHandler([&](const Incoming& in) {
      if (in.payload_bytes == 0) return Accept{};
      return Accept{dst.data(), c.bytes / 2, [&](absl::Status s) {
                      outcome = s;
                      landed.Notify();
                    }};
    });
    absl::Notification sent;
    std::vector<uint8_t> h = Header(6);
    a_->Send(*peer, absl::MakeConstSpan(h), c.from, c.bytes, [&](absl::Status) { sent.Notify(); });
    ASSERT_TRUE(landed.WaitForNotificationWithTimeout(absl::Seconds(20)));
    EXPECT_EQ(outcome.code(), absl::StatusCode::kOutOfRange) << outcome;
    EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t v) { return v == 0; }))
        << "bytes were written";
    ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(20)));
  }
  if (shared != nullptr) memory->Free(shared);
}

// Issue 42: a borrow ends only through the peer it came from: a Release
// naming another peer (with the right lease) leaves the sender's send open.
TEST_P(TransportConformanceTest, ABorrowIsReleasedOnlyThroughItsOwnPeer) {
  std::shared_ptr<PayloadMemory> memory = a_->payload_memory();
  const size_t n = 64u << 10;
  auto* src = static_cast<float*>(memory->Allocate(n * sizeof(float)));
  ASSERT_NE(src, nullptr);
  Borrower borrower(b_.get(), [] { return Accept{}; });
  auto to_c = b_->Connect(c_->address());  // another peer of b
  ASSERT_TRUE(to_c.ok());
  auto peer = a_->Connect(b_->address());
  ASSERT_TRUE(peer.ok());
  std::atomic<bool> done{false};
  std::vector<uint8_t> h = Header(8);
  a_->Send(*peer, absl::MakeConstSpan(h), src, n * sizeof(float),
           [&](absl::Status) { done = true; });
  const float* borrowed = borrower.Wait([&] { return done.load(); });
  if (borrowed == nullptr) GTEST_SKIP() << GetParam().name << ": not mappable in place here";
  ASSERT_NE(*to_c, borrower.from());
  b_->Release(*to_c, borrower.lease());
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(done.load()) << "ended through another peer";
  b_->Release(borrower.from(), borrower.lease());
  for (int i = 0; i < 2000 && !done.load(); ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(done.load());
  memory->Free(src);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportConformanceTest,
                         ::testing::Values(InProcBackend(), UcxBackend("posix,sysv,self"),
                                           UcxBackend("tcp,self"), UcxBackend("cma,tcp,self")),
                         TransportBackendName);

}  // namespace
}  // namespace tessel
