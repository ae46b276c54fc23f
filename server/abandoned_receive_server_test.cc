// A worker frozen (or dead) while its PUSH payload was on the way leaves the
// receive unfinished, perhaps forever (issue 44). When the rank is handed to
// its replacement (GetFrameKey: a new generation of its keys), the shard
// abandons that receive: the bucket is owed again, the replacement's push
// completes the step with the bitwise mean, and when the frozen process
// wakes up and its transfer completes after all, nothing changes: no double
// count, its bytes (0x7F in every byte, about 3.4e38 per float) land in a
// retired buffer, the next step is the mean of the next pushes. The frozen
// worker is a real process (ucx_frame_sender) sending over UCX shared
// memory, stopped (SIGSTOP) by the server's transport when its PUSH header
// arrives, before the shard asks for the rendezvous payload: so it holds no
// slot of the server's shared-memory queue, as a worker killed between
// fragments does not.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "proto/registry.pb.h"
#include "rpc/registry_client.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "server/server_test_fixture.h"
#include "testing/process.h"

extern char** environ;

namespace tessel {
namespace {

constexpr int kFloats = 64 * 1024;  // 256 KiB: a rendezvous transfer

// The sender to freeze (0: none yet) and whether it was frozen, set by the
// server's transport thread.
struct Freezer {
  std::atomic<bool> armed{false};
  std::atomic<pid_t> pid{0};
  std::atomic<bool> frozen{false};
};

// The server's UCX transport, with a look at each frame first: the first
// PUSH of rank 1 once armed stops the sender process (SIGSTOP, waited for)
// before the data plane accepts it, so the rendezvous payload is asked for
// (UCX's RTR) only from a stopped process.
class FreezingTransport : public Transport {
 public:
  FreezingTransport(std::unique_ptr<Transport> inner, Freezer* freezer)
      : inner_(std::move(inner)), freezer_(freezer) {}
  std::string address() const override { return inner_->address(); }
  void SetHandler(Handler handler) override {
    inner_->SetHandler([this, handler](const Incoming& in) {
      absl::StatusOr<FrameHeader> h = DecodeWireHeader(in.header);
      if (h.ok() && h->type == FrameType::kPush && h->rank == 1 &&
          freezer_->armed.exchange(false)) {
        const absl::Time deadline = absl::Now() + absl::Seconds(5);
        while (freezer_->pid.load() == 0 && absl::Now() < deadline)
          absl::SleepFor(absl::Milliseconds(1));
        const pid_t pid = freezer_->pid.load();
        int status = 0;
        if (pid > 0 && kill(pid, SIGSTOP) == 0 && waitpid(pid, &status, WUNTRACED) == pid &&
            WIFSTOPPED(status)) {
          freezer_->frozen = true;
        }
      }
      return handler(in);
    });
  }
  absl::StatusOr<PeerId> Connect(absl::string_view address) override {
    return inner_->Connect(address);
  }
  void Send(PeerId to, absl::Span<const uint8_t> header, const void* payload, size_t bytes,
            SendDone done) override {
    inner_->Send(to, header, payload, bytes, std::move(done));
  }
  void Shutdown() override { inner_->Shutdown(); }
  std::string name() const override { return inner_->name(); }
  std::shared_ptr<PayloadMemory> payload_memory() override { return inner_->payload_memory(); }
  void Release(PeerId from, uint64_t lease) override { inner_->Release(from, lease); }
  std::string PayloadPath(PeerId peer) override { return inner_->PayloadPath(peer); }
  absl::Status CheckReceiveQueue(absl::Duration timeout) override {
    return inner_->CheckReceiveQueue(timeout);
  }

 private:
  const std::unique_ptr<Transport> inner_;
  Freezer* const freezer_;
};

// Param: data-path authentication on (the rank's keys are handed over) or
// off (--insecure: no keys, but GetFrameKey still tells the replacement's
// claim from a retry, FrameKeys::ClaimsOf).
class AbandonedReceiveServerTest : public UcxShardServerTest,
                                   public ::testing::WithParamInterface<bool> {
 protected:
  AbandonedReceiveServerTest() { options_.data_auth = GetParam(); }
  ~AbandonedReceiveServerTest() override {
    if (sender_ > 0) {  // a failed test: do not leave it stopped
      kill(sender_, SIGKILL);
      waitpid(sender_, nullptr, 0);
    }
  }
  std::unique_ptr<Transport> ServerTransport() override {
    return std::make_unique<FreezingTransport>(UcxShardServerTest::ServerTransport(), &freezer_);
  }

  std::unique_ptr<RegistryClient> Join(int rank) { return JoinWorker("B", rank); }
  grpc::Status Ask(int rank, const std::string& claim, int64_t member_epoch,
                   v1::FrameKeyResponse* resp) {
    return GetFrameKey("B", rank, /*epoch=*/1, claim, /*max_key_version=*/0, resp, member_epoch);
  }
  // The rank's keys (null when frames go untagged).
  static std::shared_ptr<const RankFrameKeys> KeysOf(const v1::FrameKeyResponse& resp, int rank) {
    if (!GetParam()) {
      EXPECT_TRUE(resp.secret().empty());
      return nullptr;
    }
    auto keys =
        RankFrameKeys::Create(FrameKeyGrant{resp.secret(), ""}, JobId("B"), 0, rank, /*epoch=*/1);
    EXPECT_TRUE(keys.ok()) << keys.status();
    return keys.ok() ? *keys : nullptr;
  }
  // `h` as the holder of `keys` sends it (untagged without).
  static std::vector<uint8_t> Wire(const std::shared_ptr<const RankFrameKeys>& keys,
                                   const FrameHeader& h) {
    if (keys == nullptr) {
      const HeaderBytes bytes = EncodeHeader(h);
      return std::vector<uint8_t>(bytes.begin(), bytes.end());
    }
    const SealedHeader sealed = keys->Seal(h, false);
    return std::vector<uint8_t>(sealed.begin(), sealed.end());
  }
  static std::vector<uint8_t> Push(const std::shared_ptr<const RankFrameKeys>& keys, int rank,
                                   int64_t step) {
    return Wire(keys, TestFrameHeader(FrameType::kPush, "B", 1, step, rank, kFloats * 4));
  }
  static std::vector<uint8_t> Pull(const std::shared_ptr<const RankFrameKeys>& keys, int rank,
                                   int64_t step) {
    return Wire(keys, TestFrameHeader(FrameType::kPull, "B", 1, step, rank, 0));
  }
  // Starts ucx_frame_sender: one frame of `header` and a kFloats payload;
  // the server's transport freezes it when the header arrives.
  void StartSender(const std::vector<uint8_t>& header) {
    freezer_.armed = true;
    const std::string binary = FindBinary("transport/ucx_frame_sender");
    std::vector<std::string> args = {
        binary,
        absl::BytesToHexString(server_->transport_address()),
        kTestUcxTls,
        absl::BytesToHexString(
            absl::string_view(reinterpret_cast<const char*>(header.data()), header.size())),
        absl::StrCat(kFloats * 4),
        "1"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ), 0)
        << "cannot start " << binary;
    sender_ = pid;
    freezer_.pid = pid;
  }
  // Waits up to `timeout` for the sender to exit: its wait status, or -1.
  int AwaitSenderExit(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      int status = 0;
      if (waitpid(sender_, &status, WNOHANG) == sender_) {
        sender_ = 0;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1;
  }
  // Rank 1's entry of the step's waiting list (empty if none).
  v1::SlotWaiting Rank1Waiting() {
    const v1::ShardStats st = Stats("B");
    for (const v1::SlotWaiting& w : st.waiting().slots()) {
      if (w.slot() == 1) return w;
    }
    return {};
  }

  Freezer freezer_;
  pid_t sender_ = 0;
};

TEST_P(AbandonedReceiveServerTest, AFrozenSendersReceiveIsAbandonedAtTheHandover) {
  ASSERT_TRUE(CreateJob(OneBucketDdpJob("B", 2, kFloats)).ok());
  std::unique_ptr<RegistryClient> member0 = Join(0), earlier = Join(1);
  const std::string claim0 = NewJobSecret(), earlier_claim = NewJobSecret(),
                    replacement_claim = NewJobSecret();
  v1::FrameKeyResponse key0, earlier_key, replacement_key;
  ASSERT_TRUE(Ask(0, claim0, member0->joined_epoch(), &key0).ok());
  ASSERT_TRUE(Ask(1, earlier_claim, earlier->joined_epoch(), &earlier_key).ok());
  std::shared_ptr<const RankFrameKeys> r0 = KeysOf(key0, 0), old1 = KeysOf(earlier_key, 1);
  ASSERT_EQ(r0 != nullptr && old1 != nullptr, GetParam());

  // Rank 0 pushes its gradient of step 1; rank 1's process sends its push
  // and freezes inside the transfer: the shard's slot stays receiving.
  const std::string address = server_->transport_address();
  FakeUcxWorker rank0(address, kFloats), replacement_ep(address, kFloats);
  const std::vector<float> g0 = TwoRankGradient(0, kFloats), g1 = TwoRankGradient(1, kFloats);
  rank0.Send(Push(r0, 0, 0), g0.data(), kFloats * 4);
  for (int i = 0; i < 500 && Stats("B").pushed_bytes() < kFloats * 4; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(Stats("B").pushed_bytes(), kFloats * 4);
  StartSender(Push(old1, 1, 0));
  v1::SlotWaiting w;
  for (int i = 0; i < 500 && w.receiving_size() == 0; ++i) {
    w = Rank1Waiting();
    if (w.receiving_size() == 0) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(w.receiving_size(), 1) << "the frozen push holds no slot";
  ASSERT_TRUE(freezer_.frozen) << "the sender was not stopped";

  // It is replaced: its membership ends, the replacement joins and is
  // handed rank 1's keys. The shard abandons the frozen receive.
  ASSERT_TRUE(earlier->Leave().ok());
  std::unique_ptr<RegistryClient> replacement = Join(1);
  grpc::Status s = Ask(1, replacement_claim, replacement->joined_epoch(), &replacement_key);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Stats("B").frame_key_handovers(), 1);
  w = Rank1Waiting();
  EXPECT_EQ(w.receiving_size(), 0) << "the frozen receive was not abandoned";
  ASSERT_EQ(w.not_pushed_size(), 1) << "bucket 0 is not owed again";
  EXPECT_EQ(w.not_pushed(0), 0);
  std::shared_ptr<const RankFrameKeys> new1 = KeysOf(replacement_key, 1);
  ASSERT_EQ(new1 != nullptr, GetParam());

  // The replacement pushes what the stats list; the step completes with
  // the mean of rank 0's and its pushes.
  replacement_ep.Send(Push(new1, 1, 0), g1.data(), kFloats * 4);
  rank0.Send(Pull(r0, 0, 1), nullptr, 0);
  replacement_ep.Send(Pull(new1, 1, 1), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(1)) << "the step did not complete with the replacement's push";
  ASSERT_TRUE(replacement_ep.AwaitParams(1));
  EXPECT_TRUE(IsBitwiseMean(rank0.params(), g0, g1));
  EXPECT_TRUE(IsBitwiseMean(replacement_ep.params(), g0, g1));
  EXPECT_EQ(Stats("B").step(), 1);
  EXPECT_EQ(Stats("B").pushed_bytes(), 2 * kFloats * 4);

  // The frozen process wakes up: its transfer completes (late, into the
  // retired buffer) and changes nothing.
  ASSERT_EQ(kill(sender_, SIGCONT), 0);
  const int exited = AwaitSenderExit(absl::Seconds(30));
  ASSERT_TRUE(exited != -1 && WIFEXITED(exited)) << "the sender did not finish: " << exited;
  EXPECT_EQ(WEXITSTATUS(exited), 0) << "its transfer did not complete";
  v1::ShardStats st = Stats("B");
  EXPECT_EQ(st.step(), 1);
  EXPECT_EQ(st.pushed_bytes(), 2 * kFloats * 4) << "the late completion was counted";
  EXPECT_EQ(st.waiting().slots_size(), 0);

  // The next step: the mean of the next pushes, bit for bit.
  std::vector<float> h0(kFloats), h1(kFloats);
  for (int i = 0; i < kFloats; ++i) h0[i] = g0[i] * 2.f, h1[i] = g1[i] * 0.5f;
  rank0.Send(Push(r0, 0, 1), h0.data(), kFloats * 4);
  replacement_ep.Send(Push(new1, 1, 1), h1.data(), kFloats * 4);
  rank0.Send(Pull(r0, 0, 2), nullptr, 0);
  replacement_ep.Send(Pull(new1, 1, 2), nullptr, 0);
  ASSERT_TRUE(rank0.AwaitParams(2));
  ASSERT_TRUE(replacement_ep.AwaitParams(2));
  EXPECT_TRUE(IsBitwiseMean(rank0.params(), h0, h1));
  EXPECT_TRUE(IsBitwiseMean(replacement_ep.params(), h0, h1));
  EXPECT_EQ(Stats("B").step(), 2);
  EXPECT_EQ(Stats("B").pushed_bytes(), 4 * kFloats * 4);
}

INSTANTIATE_TEST_SUITE_P(DataAuth, AbandonedReceiveServerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Keyed" : "Untagged";
                         });

}  // namespace
}  // namespace tessel
