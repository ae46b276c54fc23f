// A peer that sent and then died (kill -9) while the receiver still answers
// it, as a shard server answers a worker killed mid-step: every send to it
// must fail cleanly, never touch an endpoint UCX has destroyed. The receiver
// answers through the endpoint the message arrived on, which UCX made by
// itself; UCX 1.13 destroys such an endpoint when its peer fails (the
// chaos soak's servers crashed in ucp_am_send_nbx after a worker was killed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/process.h"
#include "transport/transport_testing.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {

constexpr PeerId kNobody = ~PeerId{0};

class Receiver {
 public:
  Receiver() : transport_(MakeUcxTransport({.tls = "tcp"})) {
    transport_->SetHandler([this](const Incoming& in) {
      from_ = in.from;
      ++received_;
      return Accept{};
    });
  }
  UcxTransport& transport() { return *transport_; }
  PeerId from() const { return from_.load(); }
  int received() const { return received_.load(); }

  // Sends to `to` every millisecond for `d`; returns {ok, failed}.
  std::pair<int, int> Answer(PeerId to, absl::Duration d) {
    std::atomic<int> ok{0}, failed{0}, done{0};
    int sent = 0;
    const uint8_t header[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    for (absl::Time end = absl::Now() + d; absl::Now() < end; ++sent) {
      transport_->Send(to, header, nullptr, 0, [&](absl::Status s) {
        (s.ok() ? ok : failed)++;
        done++;
      });
      absl::SleepFor(absl::Milliseconds(1));
    }
    for (absl::Time end = absl::Now() + absl::Seconds(10);
         done.load() < sent && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_EQ(done.load(), sent) << "every send completes, one way or the other";
    return {ok.load(), failed.load()};
  }

 private:
  std::unique_ptr<UcxTransport> transport_;
  std::atomic<PeerId> from_{kNobody};
  std::atomic<int> received_{0};
};

TEST(UcxPeerDeathTest, AnsweringAPeerThatWasKilledFailsCleanly) {
  Receiver receiver;
  ProcessGroup group(::testing::TempDir());
  const std::string sender = FindBinary("transport/ucx_frame_sender");
  for (int round = 0; round < 3; ++round) {
    const std::string name = "sender" + std::to_string(round);
    const int before = receiver.received();
    ASSERT_TRUE(group
                    .Start(name, {sender, absl::BytesToHexString(receiver.transport().address()),
                                  "tcp", "0102030405060708", "0", "1", "hold"})
                    .ok());
    for (absl::Time end = absl::Now() + absl::Seconds(20);
         receiver.received() == before && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_GT(receiver.received(), before) << group.LogTail(name, 10);
    const PeerId peer = receiver.from();
    auto [ok_alive, failed_alive] = receiver.Answer(peer, absl::Milliseconds(50));
    EXPECT_GT(ok_alive, 0) << "answers reach a live peer";
    EXPECT_EQ(failed_alive, 0);
    group.StopAll();  // SIGTERM, unhandled: it dies at once, its UCX never closes
    auto [ok_dead, failed_dead] = receiver.Answer(peer, absl::Seconds(3));
    EXPECT_GT(failed_dead, 0) << "answers to the killed peer fail (" << ok_dead << " went out)";
  }
}

}  // namespace
}  // namespace tessel
