// WedgeProbe against a real UCX worker in this thread: a probe sent through
// the probe's own worker arrives at the target; one never sent (or never
// received: the target is not progressed) is reported as a wedged queue.
// The real wedge (a peer killed mid-write) is ucx_wedge_test's.
#include "transport/ucx/internal/wedge_probe.h"

#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/ucx/internal/context.h"
#include "transport/ucx/internal/ucp_testing.h"

namespace tessel {
namespace ucx_internal {
namespace {

constexpr unsigned kProbeAmId = 8;

class WedgeProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    context_ = TestContext();
    ASSERT_NE(context_, nullptr);
    target_ = TestWorker(context_->get());
    ASSERT_NE(target_, nullptr);
    address_ = WorkerAddress(target_);
    auto probe = WedgeProbe::Create(context_->get());
    ASSERT_TRUE(probe.ok()) << probe.status();
    probe_ = std::move(*probe);
  }
  void TearDown() override {
    if (probe_ != nullptr) {
      if (void* r = probe_->Close()) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(probe_->worker());
        ucp_request_free(r);
      }
      probe_.reset();
    }
    if (target_ != nullptr) ucp_worker_destroy(target_);
  }
  // Progresses both ends until probe `seq` arrived (or 10 s).
  absl::Status Deliver(uint64_t seq) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      probe_->Progress();
      ucp_worker_progress(target_);
      if (probe_->Await(seq, absl::ZeroDuration()).ok()) return absl::OkStatus();
    }
    return probe_->Await(seq, absl::ZeroDuration());
  }

  std::shared_ptr<UcxContext> context_;
  ucp_worker_h target_ = nullptr;
  std::string address_;
  std::unique_ptr<WedgeProbe> probe_;
};

TEST_F(WedgeProbeTest, AProbeThatArrivesMeansTheQueueFlows) {
  ASSERT_TRUE(probe_->Attach(target_, address_, kProbeAmId).ok());
  const uint64_t first = probe_->NextSeq();
  EXPECT_EQ(first, 1u);
  probe_->Send(first);
  EXPECT_TRUE(Deliver(first).ok());
  const uint64_t second = probe_->NextSeq();
  EXPECT_EQ(second, 2u);
  probe_->Send(second);
  EXPECT_TRUE(Deliver(second).ok());
  EXPECT_TRUE(probe_->Await(first, absl::ZeroDuration()).ok()) << "a later probe covers it";
}

TEST_F(WedgeProbeTest, AProbeThatDoesNotArriveMeansWedged) {
  ASSERT_TRUE(probe_->Attach(target_, address_, kProbeAmId).ok());
  const uint64_t seq = probe_->NextSeq();
  probe_->Send(seq);
  probe_->Progress();  // the target is never progressed: nothing is received
  absl::Status s = probe_->Await(seq, absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("wedged"), std::string::npos) << s;
}

TEST_F(WedgeProbeTest, UnattachedProbesGoNowhere) {
  const uint64_t seq = probe_->NextSeq();
  probe_->Send(seq);  // no endpoint: a no-op
  EXPECT_FALSE(probe_->Progress());
  EXPECT_EQ(probe_->Await(seq, absl::Milliseconds(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(probe_->Close(), nullptr);
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
