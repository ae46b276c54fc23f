// A worker that dies while its PUSH payload is on the way (issue 44): the
// transport completes the receive with an error (UCX purges a rendezvous
// receive from a peer that failed, transport/ucx/internal/in_flight.cc), and
// the data plane's completion releases the slot the PUSH reserved, so the
// shard's stats list the bucket as not pushed again and the rank's
// replacement, from another endpoint, pushes it and the step completes.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/wire.h"
#include "gtest/gtest.h"
#include "server/checkpointer.h"
#include "server/data_plane.h"
#include "server/job_table.h"
#include "server/shard_job_testing.h"
#include "transport/transport.h"

namespace tessel {
namespace {

constexpr int64_t kEpoch = 2;

// Hands each frame to the plane's handler and gives the test the Accept, so
// the test decides how (and whether) the payload lands.
class ManualTransport : public Transport {
 public:
  std::string address() const override { return "manual"; }
  void SetHandler(Handler handler) override { handler_ = std::move(handler); }
  absl::StatusOr<PeerId> Connect(absl::string_view) override { return PeerId{1}; }
  void Send(PeerId to, absl::Span<const uint8_t> header, const void*, size_t,
            SendDone done) override {
    absl::StatusOr<FrameHeader> h = DecodeHeader(header.data(), header.size());
    {
      absl::MutexLock lock(&mu_);
      if (h.ok()) sent_.push_back({to, *h});
    }
    if (done) done(absl::OkStatus());
  }
  void Shutdown() override {}
  std::string name() const override { return "manual"; }

  Accept Offer(PeerId from, const FrameHeader& h) {
    const HeaderBytes bytes = EncodeHeader(h);
    Incoming in;
    in.from = from;
    in.header = absl::MakeConstSpan(bytes.data(), bytes.size());
    in.payload_bytes = static_cast<size_t>(h.payload_bytes);
    return handler_(in);
  }
  std::vector<std::pair<PeerId, FrameHeader>> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  Handler handler_;
  absl::Mutex mu_;
  std::vector<std::pair<PeerId, FrameHeader>> sent_;
};

TEST(DataPlaneDeadSenderTest, ASlotReservedByADeadSenderIsReleasedForItsReplacement) {
  ManualTransport transport;
  Checkpointer checkpointer(nullptr);
  JobTable jobs(&checkpointer);
  v1::CreateJobRequest req;
  *req.mutable_spec() = OneTensorSpec("dead", v1::STRATEGY_ZERO2, 2, 32, 16);
  req.set_shard_index(0);
  req.set_epoch(kEpoch);
  ASSERT_TRUE(jobs.CreateJob(req).ok());
  std::shared_ptr<ShardJob> job = jobs.FindJob("dead");
  ASSERT_NE(job, nullptr);
  InitWithTestValues(*job, kEpoch);
  DataPlane plane(&transport, &jobs, &checkpointer, nullptr, nullptr, /*update_threads=*/1,
                  absl::ZeroDuration(), SpinMode::kEvent);

  const auto push = [&](PeerId from, int rank, int bucket) {
    FrameHeader h = JobFrame(*job, kEpoch, FrameType::kPush, rank, bucket);
    h.payload_bytes = 16 * 4;
    return transport.Offer(from, h);
  };
  const auto land = [](Accept& a, int rank) {
    ASSERT_NE(a.dst, nullptr);
    ASSERT_EQ(a.capacity, 16u * 4);
    std::vector<float> g(16);
    for (int i = 0; i < 16; ++i) g[i] = TestValue(rank, i, 1);
    std::memcpy(a.dst, g.data(), a.capacity);
    a.done(absl::OkStatus());
  };
  // Alone, a failed receive leaves no step in progress: the stats list
  // nothing (step_started_us -1), i.e. every bucket of the step is owed.
  Accept alone = push(7, 1, 0);
  ASSERT_NE(alone.dst, nullptr);
  alone.done(absl::UnavailableError("UCX receive failed: peer died"));
  EXPECT_EQ(job->Stats(false).step_started_us, -1);
  EXPECT_TRUE(job->Stats(false).waiting.empty());
  // Rank 0 pushes bucket 0; rank 1 (peer 7) pushes it and dies with the
  // payload on the way.
  Accept first = push(3, 0, 0);
  land(first, 0);
  Accept dying = push(7, 1, 0);
  ASSERT_NE(dying.dst, nullptr);
  JobStats st = job->Stats(false);
  ASSERT_EQ(st.waiting.size(), 2u);
  EXPECT_EQ(st.waiting[1].receiving, std::vector<int>{0});
  dying.done(absl::UnavailableError("UCX receive failed: peer died"));
  st = job->Stats(false);
  ASSERT_EQ(st.waiting.size(), 2u);
  EXPECT_TRUE(st.waiting[1].receiving.empty()) << "the dead sender's slot is released";
  EXPECT_EQ(st.waiting[1].not_pushed, (std::vector<int>{0, 1})) << "what the replacement owes";
  EXPECT_EQ(st.waiting[0].not_pushed, std::vector<int>{1});
  // Rank 0 pushes bucket 1; the replacement of rank 1 (peer 9) pushes what
  // the stats list, and the step completes.
  Accept second = push(3, 0, 1);
  land(second, 0);
  for (int b : {0, 1}) {
    Accept a = push(9, 1, b);
    land(a, 1);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (job->version() < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(job->version(), 1);
  plane.Stop();
}

}  // namespace
}  // namespace tessel
