// DataChannel against scripted shard servers (scripted_server.h): headers
// sized by the one payload rule, a send to an unconnected shard failing the
// step with what to check, WaitFor's three endings (done, error, deadline)
// and its periodic check, Notify waking a wait, receives landing only in
// their epoch, READY and PULL of the host's workers, and frame keys.
#include "worker/internal/data_channel.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/topk.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/frame_auth.h"
#include "runtime/rank_keys.h"
#include "transport/inproc/inproc_transport.h"
#include "worker/internal/job_context.h"
#include "worker/internal/scripted_server.h"

namespace tessel::internal {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kEpoch = 3;

// A sink with its own state under its own lock: it takes every PARAMS frame
// that fits into its buffer (or, told so, under another epoch) and counts
// what is offered and what lands.
class CountingSink : public FrameSink {
 public:
  explicit CountingSink(DataChannel* channel) : channel_(channel), buffer_(1000) {}
  Accept OnParams(const FrameHeader& h) override {
    ++offered_;
    if (h.payload_bytes > buffer_.size() * sizeof(float)) return Accept{};
    const int64_t epoch = receive_epoch_.load() >= 0 ? receive_epoch_.load() : h.epoch;
    return channel_->Receive(buffer_.data(), buffer_.size() * sizeof(float), epoch, [this] {
      {
        absl::MutexLock lock(&mu_);
        ++landed_;
      }
      channel_->Notify();
    });
  }
  int landed() {
    absl::MutexLock lock(&mu_);
    return landed_;
  }
  Accept OnPush(const FrameHeader& h, const Incoming& in) override {
    ++pushes_offered_;
    return Accept{};
  }
  int offered() const { return offered_.load(); }
  int pushes_offered() const { return pushes_offered_.load(); }
  float first() const { return buffer_[0]; }
  void ReceiveUnder(int64_t epoch) { receive_epoch_ = epoch; }

 private:
  DataChannel* const channel_;
  std::vector<float> buffer_;
  std::atomic<int64_t> receive_epoch_{-1};
  std::atomic<int> offered_{0};
  std::atomic<int> pushes_offered_{0};
  absl::Mutex mu_;
  int landed_ ABSL_GUARDED_BY(mu_) = 0;
};

class DataChannelTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(WorkerOptions()); }

  void Make(WorkerOptions o) {
    channel_.reset();
    o.job = "j";
    ctx_ = DataPathContext(o, kEpoch, {{"w", {100}}}, 2, 40);
    channel_ = std::make_unique<DataChannel>(ctx_.get(), InProcTransport::Create(fabric_));
    ASSERT_TRUE(ConnectChannel(channel_.get(), {&server0_, &server1_}).ok());
    sink_ = std::make_unique<CountingSink>(channel_.get());
    channel_->SetSink(sink_.get());
  }

  void TearDown() override { channel_.reset(); }

  // Sends a PULL to shard 0 and returns the worker's endpoint as the server
  // sees it.
  PeerId WorkerAtServer0() {
    channel_->Send(channel_->Header(FrameType::kPull, 1, 0, 0), nullptr);
    return server0_.Await(1).at(0).from;
  }
  FrameHeader Control(FrameType type, int rank, int64_t epoch, int64_t step) {
    FrameHeader h = MakeHeader(type, ctx_->job_id, epoch, step, rank, 0, 0);
    return h;
  }

  std::shared_ptr<InProcFabric> fabric_ = std::make_shared<InProcFabric>();
  ScriptedServer server0_{fabric_};
  ScriptedServer server1_{fabric_};
  std::unique_ptr<JobContext> ctx_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<CountingSink> sink_;
};

TEST_F(DataChannelTest, HeadersCarryTheJobAndTheOnePayloadRule) {
  const int64_t n = ctx_->layout->bucket_range(0, 0).size();
  FrameHeader push = channel_->Header(FrameType::kPush, 5, 0, 0);
  EXPECT_EQ(push.job_id, ctx_->job_id);
  EXPECT_EQ(push.epoch, kEpoch);
  EXPECT_EQ(push.step, 5);
  EXPECT_EQ(push.payload_bytes, DensePayloadBytes(n, false));
  EXPECT_EQ(channel_->Header(FrameType::kPull, 5, 1, 0).payload_bytes, 0u);

  ctx_->half = HalfType::kBF16;  // PUSH in half, INIT still fp32 masters
  EXPECT_EQ(channel_->Header(FrameType::kPush, 5, 0, 0).payload_bytes, DensePayloadBytes(n, true));
  EXPECT_EQ(channel_->Header(FrameType::kInit, 0, 0, 0).payload_bytes, DensePayloadBytes(n, false));

  ctx_->half.reset();
  ctx_->options.topk_ratio = 0.1;
  EXPECT_EQ(channel_->Header(FrameType::kPush, 5, 0, 0).payload_bytes,
            SparseBytes(TopkCount(0.1, n)));
}

TEST_F(DataChannelTest, ASendToAShardNeverConnectedFailsTheNextWaitSayingWhatToCheck) {
  channel_->SetPeer(1, DataChannel::kNoPeer);
  channel_->Send(channel_->Header(FrameType::kPull, 1, 1, 0), nullptr);
  absl::Status s = channel_->WaitFor([] { return false; }, [] { return "nothing"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard 1 (" + server1_.address() + ")"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--ucx_tls"));
  EXPECT_TRUE(IsRecoverable(s));
  channel_->ClearErrors();
  EXPECT_TRUE(channel_->WaitFor([] { return true; }, [] { return "nothing"; }).ok());
}

TEST_F(DataChannelTest, AWaitEndsAtTheDeadlineNamingWhatAndRunsThePeriodicCheck) {
  std::atomic<int> checks{0};
  channel_->SetPeriodicCheck([&] {
    ++checks;
    return absl::OkStatus();
  });
  const absl::Time start = absl::Now();
  absl::Status s = channel_->WaitFor([] { return false; }, [] { return "the test's frames"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("the test's frames did not complete within 2s"));
  EXPECT_GE(absl::Now() - start, absl::Seconds(2));
  EXPECT_GE(checks.load(), 3);  // every 250 ms

  channel_->SetPeriodicCheck([] { return absl::AbortedError("a worker left"); });
  s = channel_->WaitFor([] { return false; }, [] { return "x"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "a worker left");
}

TEST_F(DataChannelTest, NotifyWakesAWaitWhoseConditionNowHolds) {
  absl::Mutex mu;
  bool flag = false;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    {
      absl::MutexLock lock(&mu);
      flag = true;
    }
    channel_->Notify();
  });
  // No periodic check and a long deadline: only Notify or the 250 ms slice
  // can end it; either way the wait sees the condition.
  absl::Status s = channel_->WaitFor(
      [&] {
        absl::MutexLock lock(&mu);
        return flag;
      },
      [] { return "the flag"; });
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(DataChannelTest, ParamsLandThroughTheSinkOnlyWhileTheirEpochIsCurrent) {
  const PeerId worker = WorkerAtServer0();
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 2.f));
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 1; }, [] { return "1"; }).ok());
  EXPECT_EQ(sink_->first(), 2.f);

  // A receive the sink took under an epoch a recovery has left: it arrives,
  // but `landed` does not run and nothing stays in flight.
  sink_->ReceiveUnder(kEpoch - 1);
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 3.f));
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->offered() == 2; }, [] { return "2"; }).ok());
  EXPECT_FALSE(channel_->SettleReceives(absl::Seconds(5)));
  EXPECT_EQ(channel_->inflight_receives(), 0);
  EXPECT_EQ(sink_->landed(), 1);

  // PARAMS of a bucket the layout does not have never reach the sink.
  sink_->ReceiveUnder(-1);
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, ctx_->layout->num_buckets(0), 1, 160),
                 FloatBytes(40, 4.f));
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 5.f));
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 2; }, [] { return "2"; }).ok());
  EXPECT_EQ(sink_->offered(), 3);
  EXPECT_EQ(sink_->first(), 5.f);
}

TEST_F(DataChannelTest, AnErrorOfTheCurrentEpochFailsTheWaitAndAnOldOneIsCountedStale) {
  const PeerId worker = WorkerAtServer0();
  FrameHeader old = Control(FrameType::kError, 0, kEpoch - 1, 1);
  old.code = static_cast<int32_t>(absl::StatusCode::kFailedPrecondition);
  server0_.Reply(worker, old, {});
  FrameHeader now = Control(FrameType::kError, 0, kEpoch, 1);
  now.code = static_cast<int32_t>(absl::StatusCode::kNotFound);
  const std::string why = "no such job";
  now.payload_bytes = why.size();  // as servers write it
  server0_.Reply(worker, now, std::vector<uint8_t>(why.begin(), why.end()));
  absl::Status s = channel_->WaitFor([] { return false; }, [] { return "x"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shard 0 refused"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no such job"));
  EXPECT_EQ(channel_->stale_dropped(), 1);
  // A new epoch forgets it.
  channel_->SetEpoch(kEpoch + 1);
  EXPECT_TRUE(channel_->WaitFor([] { return true; }, [] { return "x"; }).ok());
}

TEST_F(DataChannelTest, ReadyAndPullOfTheHostsWorkersAreRecordedPerEpoch) {
  const PeerId worker = WorkerAtServer0();
  EXPECT_EQ(channel_->ReadyEpoch(1), -1);
  server0_.Reply(worker, Control(FrameType::kReady, 1, kEpoch, 0), {});
  server0_.Reply(worker, Control(FrameType::kPull, 1, kEpoch, 4), {});
  ASSERT_TRUE(
      channel_
          ->WaitFor([&] { return channel_->ReadyEpoch(1) == kEpoch && channel_->Pulled(1, 4); },
                    [] { return "READY and PULL"; })
          .ok());
  EXPECT_TRUE(channel_->Pulled(1, 3));
  EXPECT_FALSE(channel_->Pulled(1, 5));
  EXPECT_FALSE(channel_->Pulled(2, 4));
  channel_->SetEpoch(kEpoch + 1);  // a PULL of the old epoch does not count
  EXPECT_FALSE(channel_->Pulled(1, 4));
  EXPECT_EQ(channel_->ReadyEpoch(1), kEpoch);
}

TEST_F(DataChannelTest, WithFrameKeysFramesAreSealedAndUntaggedOnesDropped) {
  EXPECT_EQ(channel_->SetFrameKeys({FrameKeyGrant{"only one", ""}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(channel_->SetFrameKeys({FrameKeyGrant{"short", ""}, FrameKeyGrant{}}).code(),
            absl::StatusCode::kInvalidArgument);
  auto job = *JobFrameKeys::Create(NewJobSecret(), ctx_->job_id, 0);
  const int rank = ctx_->rank.load();
  ASSERT_TRUE(channel_
                  ->SetFrameKeys({FrameKeyGrant{job->RankSecret(rank, ctx_->epoch.load()), ""},
                                  FrameKeyGrant{}})
                  .ok());
  EXPECT_TRUE(channel_->authenticated());
  channel_->Send(channel_->Header(FrameType::kPull, 1, 0, 0), nullptr);
  channel_->Send(channel_->Header(FrameType::kPull, 1, 1, 0), nullptr);
  const ScriptedServer::Frame to0 = server0_.Await(1).at(0);
  const ScriptedServer::Frame to1 = server1_.Await(1).at(0);
  EXPECT_EQ(to0.header_bytes, kSealedHeaderBytes);
  EXPECT_EQ(to1.header_bytes, kHeaderBytes);

  server0_.Reply(to0.from, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 1.f));  // no tag
  server0_.Reply(to0.from, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 2.f), job.get());
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 1; }, [] { return "1"; }).ok());
  EXPECT_EQ(sink_->first(), 2.f);
  EXPECT_EQ(channel_->unauthenticated(), 1);
}

// Issue 42 part 2: another member of the job holds its own rank's keys only.
// Its PARAMS toward this rank, sealed with any key it has (its down key: the
// server's toward it; its up key), are dropped; an ERROR it forges too.
TEST_F(DataChannelTest, AnotherRanksKeysForgeNoFrameTowardThisRank) {
  auto job = *JobFrameKeys::Create(NewJobSecret(), ctx_->job_id, 0);
  const int rank = ctx_->rank.load();
  const int64_t epoch = ctx_->epoch.load();
  ASSERT_TRUE(
      channel_->SetFrameKeys({FrameKeyGrant{job->RankSecret(rank, epoch), ""}, FrameKeyGrant{}})
          .ok());
  const PeerId worker = WorkerAtServer0();
  const int other = rank + 1;
  auto theirs = *RankFrameKeys::Create(FrameKeyGrant{job->RankSecret(other, epoch), ""},
                                       ctx_->job_id, 0, other, epoch);
  const FrameHeader params = ParamsHeader(*ctx_, 0, 0, 1, 160);  // addressed to `rank`
  FrameHeader to_them = params;
  to_them.rank = other;
  // What the forger can make: its own down key's tag re-addressed, its up key's.
  SealedHeader with_down = job->SealToWorker(to_them);
  const HeaderBytes readdressed = EncodeHeader(params);
  std::memcpy(with_down.data(), readdressed.data(), kHeaderBytes);
  const std::vector<uint8_t> payload = FloatBytes(40, 7.f);
  server0_.SendRaw(worker, with_down, payload);
  const SealedHeader with_up = theirs->Seal(params, /*to_worker=*/false);
  server0_.SendRaw(worker, with_up, payload);
  const SealedHeader with_up_as_worker = theirs->Seal(params, /*to_worker=*/true);
  server0_.SendRaw(worker, with_up_as_worker, payload);
  FrameHeader error = params;
  error.type = FrameType::kError;
  error.payload_bytes = 0;
  const SealedHeader forged_error = theirs->Seal(error, false);
  server0_.SendRaw(worker, forged_error, {});
  ASSERT_TRUE(
      channel_->WaitFor([&] { return channel_->unauthenticated() == 4; }, [] { return "4"; }).ok());
  EXPECT_EQ(sink_->offered(), 0);
  // The server's real frame still lands.
  server0_.Reply(worker, params, FloatBytes(40, 2.f), job.get());
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 1; }, [] { return "1"; }).ok());
  EXPECT_EQ(sink_->first(), 2.f);
}

// Issue 42 part 4: payload integrity (the servers' --data_integrity=payload).
// The worker's frames carry their payload's tag; a PARAMS (or ERROR) whose
// payload changed in flight under its valid header is dropped before the
// sink hears of it, and the step goes on with the real frame.
TEST_F(DataChannelTest, WithPayloadTagsAPayloadChangedInFlightIsDropped) {
  auto job = *JobFrameKeys::Create(NewJobSecret(), ctx_->job_id, 0, /*payload=*/true);
  const int rank = ctx_->rank.load();
  const int64_t epoch = ctx_->epoch.load();
  ASSERT_TRUE(
      channel_
          ->SetFrameKeys({FrameKeyGrant{job->RankSecret(rank, epoch), "", true}, FrameKeyGrant{}})
          .ok());
  // What this worker sends carries its payload's tag under its up key.
  const std::vector<uint8_t> grads = FloatBytes(40, 0.5f);
  FrameHeader push = channel_->Header(FrameType::kPush, 0, 0, 0);
  push.payload_bytes = grads.size();
  channel_->Send(push, grads.data());
  const ScriptedServer::Frame got = server0_.Await(1).at(0);
  ASSERT_EQ(got.header_bytes, kPayloadSealedHeaderBytes);
  EXPECT_TRUE(job->VerifyFromWorker(got.wire_header, got.header));
  EXPECT_TRUE(job->VerifyPayloadFromWorker(got.wire_header, got.header, got.payload.data()));
  std::vector<uint8_t> changed = got.payload;
  changed[7] ^= 0x01;
  EXPECT_FALSE(job->VerifyPayloadFromWorker(got.wire_header, got.header, changed.data()));

  // PARAMS sealed by the server, one payload byte flipped between seal and send.
  const PeerId worker = got.from;
  const FrameHeader params = ParamsHeader(*ctx_, 0, 0, 1, 160);
  std::vector<uint8_t> real = FloatBytes(40, 2.f);
  const WireHeader sealed = job->SealFrameToWorker(params, real.data());
  std::vector<uint8_t> flipped = real;
  flipped[100] ^= 0x40;
  server0_.SendRaw(worker, sealed.span(), flipped);
  // An ERROR whose text changed in flight does not fail the step either.
  FrameHeader error = params;
  error.type = FrameType::kError;
  error.code = static_cast<int32_t>(absl::StatusCode::kAborted);
  const std::string text = "refused";
  error.payload_bytes = text.size();
  const WireHeader error_sealed = job->SealFrameToWorker(error, text.data());
  server0_.SendRaw(worker, error_sealed.span(),
                   std::vector<uint8_t>{'R', 'E', 'F', 'U', 'S', 'E', 'D'});
  ASSERT_TRUE(
      channel_->WaitFor([&] { return channel_->bad_payload() == 2; }, [] { return "2"; }).ok());
  EXPECT_EQ(sink_->offered(), 1) << "the header was authentic";
  EXPECT_EQ(sink_->landed(), 0) << "the changed payload was not handed on";
  EXPECT_EQ(channel_->unauthenticated(), 2) << "a wrong payload tag is a wrong tag";
  // A header-only seal (80 bytes) is not taken where payloads are tagged.
  server0_.SendRaw(worker, job->SealToWorker(params), real);
  // The real frame lands.
  server0_.SendRaw(worker, sealed.span(), real);
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 1; }, [] { return "1"; }).ok());
  EXPECT_EQ(sink_->first(), 2.f);
  EXPECT_EQ(channel_->unauthenticated(), 3);
  EXPECT_EQ(channel_->bad_payload(), 2);
}

// Issue 42, the reproduction: a PARAMS frame of 57,600 bytes under a header
// saying 19,200 (here: 12,000 under 160, more than the sink's whole buffer),
// sent by a process in no job while the worker waits for that step. The
// sink chose its destination from the header; the transport copied what
// arrived, past the buffer (a SEGV under AddressSanitizer). The channel now
// drops it before any sink sees it, and counts it.
TEST_F(DataChannelTest, AParamsFrameLargerThanItsHeaderSaysIsDroppedBeforeTheSink) {
  const PeerId worker = WorkerAtServer0();
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(3000, 9.f));
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(20, 8.f));  // short
  ASSERT_TRUE(channel_->WaitFor([&] { return channel_->refused() == 2; }, [] { return "2"; }).ok());
  EXPECT_EQ(sink_->offered(), 0);
  EXPECT_EQ(sink_->landed(), 0);
  EXPECT_EQ(sink_->first(), 0.f) << "nothing was written";
  // The step goes on: the real frame still lands.
  server0_.Reply(worker, ParamsHeader(*ctx_, 0, 0, 1, 160), FloatBytes(40, 2.f));
  ASSERT_TRUE(channel_->WaitFor([&] { return sink_->landed() == 1; }, [] { return "1"; }).ok());
  EXPECT_EQ(sink_->first(), 2.f);
}

// The same for a host-aggregation PUSH from another worker of this host.
TEST_F(DataChannelTest, APushWhosePayloadIsNotItsHeadersSizeNeverReachesTheSink) {
  const PeerId worker = WorkerAtServer0();
  FrameHeader push = Control(FrameType::kPush, 1, kEpoch, 1);
  push.payload_bytes = 160;
  server0_.Reply(worker, push, FloatBytes(4000, 1.f));
  ASSERT_TRUE(channel_->WaitFor([&] { return channel_->refused() == 1; }, [] { return "1"; }).ok());
  server0_.Reply(worker, push, FloatBytes(40, 1.f));
  ASSERT_TRUE(
      channel_->WaitFor([&] { return sink_->pushes_offered() == 1; }, [] { return "push"; }).ok());
  EXPECT_EQ(channel_->refused(), 1);
}

// Issue 42: an ERROR frame's text is allocated only up to kMaxErrorTextBytes
// and only as long as its header says; a longer (or mis-sized) one is dropped
// and counted, and fails nothing.
TEST_F(DataChannelTest, AnErrorTextLongerThanTheLimitOrItsHeaderIsDropped) {
  const PeerId worker = WorkerAtServer0();
  FrameHeader error = Control(FrameType::kError, 0, kEpoch, 1);
  error.code = static_cast<int32_t>(absl::StatusCode::kNotFound);
  const std::vector<uint8_t> huge(kMaxErrorTextBytes + 1, 'x');
  error.payload_bytes = huge.size();
  server0_.Reply(worker, error, huge);
  error.payload_bytes = 4;
  server0_.Reply(worker, error, std::vector<uint8_t>(64, 'y'));
  ASSERT_TRUE(channel_->WaitFor([&] { return channel_->refused() == 2; }, [] { return "2"; }).ok());
  EXPECT_TRUE(channel_->WaitFor([] { return true; }, [] { return "x"; }).ok())
      << "a dropped ERROR fails nothing";
  const std::string why = "no such job";
  error.payload_bytes = why.size();
  server0_.Reply(worker, error, std::vector<uint8_t>(why.begin(), why.end()));
  absl::Status s = channel_->WaitFor([] { return false; }, [] { return "x"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no such job"));
}

}  // namespace
}  // namespace tessel::internal
