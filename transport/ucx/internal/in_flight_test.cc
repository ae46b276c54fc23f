// InFlight against real UCX workers in this thread: every `done` runs once,
// with the outcome when UCX completes the operation, or with CancelAll's
// status for what UCX never will (a rendezvous towards a worker that is
// never progressed, as a dead peer's).
#include "transport/ucx/internal/in_flight.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/ucx/internal/context.h"
#include "transport/ucx/internal/ucp_testing.h"

namespace tessel {
namespace ucx_internal {
namespace {

constexpr unsigned kAmId = 7;

class InFlightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    context_ = TestContext();
    ASSERT_NE(context_, nullptr);
    sender_ = TestWorker(context_->get());
    receiver_ = TestWorker(context_->get());
    const std::string address = WorkerAddress(receiver_);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ASSERT_EQ(ucp_ep_create(sender_, &ep, &ep_), UCS_OK);
    // Messages are dropped unless a test installs its own handler.
    SetHandler([](void*, const void*, size_t, void*, size_t,
                  const ucp_am_recv_param_t*) { return UCS_OK; },
               nullptr);
  }
  void SetHandler(ucp_am_recv_callback_t cb, void* arg) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmId;
    hp.cb = cb;
    hp.arg = arg;
    ASSERT_EQ(ucp_worker_set_am_recv_handler(receiver_, &hp), UCS_OK);
  }
  void TearDown() override {
    CloseEp();
    if (sender_ != nullptr) ucp_worker_destroy(sender_);
    if (receiver_ != nullptr) ucp_worker_destroy(receiver_);
  }
  void CloseEp() {
    if (ep_ == nullptr) return;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = ucp_ep_close_nbx(ep_, &cp);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(sender_);
      ucp_request_free(r);
    }
    ep_ = nullptr;
  }
  // Progresses the sender (and the receiver when `both`) until `cond` or 10 s.
  template <typename F>
  bool ProgressUntil(F cond, bool both) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!cond() && absl::Now() < deadline) {
      ucp_worker_progress(sender_);
      if (both) ucp_worker_progress(receiver_);
    }
    return cond();
  }

  std::shared_ptr<UcxContext> context_;
  ucp_worker_h sender_ = nullptr;
  ucp_worker_h receiver_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

TEST_F(InFlightTest, ASmallSendCompletesOnce) {
  InFlight ops;
  int calls = 0;
  absl::Status result = absl::UnknownError("not yet");
  const uint64_t payload = 42;
  ops.Send(ep_, kAmId, {1, 2, 3}, &payload, sizeof(payload), [&](absl::Status s) {
    ++calls;
    result = s;
  });
  // Both ends progress: the endpoint's wire-up needs the receiver.
  ASSERT_TRUE(ProgressUntil([&] { return calls > 0; }, /*both=*/true));
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(ops.size(), 0u);
  ops.CancelAll(absl::CancelledError("late"));
  EXPECT_EQ(calls, 1);
}

// The receiver's handler takes rendezvous data with Receive into `dst`.
struct Receiver {
  ucp_worker_h worker = nullptr;
  InFlight ops;
  std::vector<uint8_t> dst;
  std::vector<uint8_t> header;
  int landed = 0;
  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<Receiver*>(arg);
    self->header.assign(static_cast<const uint8_t*>(header),
                        static_cast<const uint8_t*>(header) + header_length);
    self->dst.resize(length);
    EXPECT_TRUE(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) << "a rendezvous-sized message";
    self->ops.Receive(self->worker, data, self->dst.data(), length, [self](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      ++self->landed;
    });
    return UCS_OK;
  }
};

TEST_F(InFlightTest, ARendezvousSendLandsThroughReceive) {
  Receiver receiver;
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAmId;
  hp.cb = &Receiver::OnAm;
  hp.arg = &receiver;
  ASSERT_EQ(ucp_worker_set_am_recv_handler(receiver_, &hp), UCS_OK);
  receiver.worker = receiver_;
  std::vector<uint8_t> src(4 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  InFlight ops;
  int sent = 0;
  ops.Send(ep_, kAmId, {9, 8, 7}, src.data(), src.size(), [&](absl::Status s) {
    EXPECT_TRUE(s.ok()) << s;
    ++sent;
  });
  ASSERT_TRUE(ProgressUntil([&] { return sent > 0 && receiver.landed > 0; }, /*both=*/true));
  EXPECT_EQ(sent, 1);
  EXPECT_EQ(receiver.landed, 1);
  EXPECT_EQ(receiver.header, (std::vector<uint8_t>{9, 8, 7}));
  EXPECT_EQ(receiver.dst, src);
  EXPECT_EQ(ops.size(), 0u);
  EXPECT_EQ(receiver.ops.size(), 0u);
}

TEST_F(InFlightTest, WhatNeverCompletesIsCancelledOnce) {
  InFlight ops;
  // Wire the endpoint up first, so what follows waits on the receiver only.
  int small = 0;
  const uint64_t word = 1;
  ops.Send(ep_, kAmId, {1}, &word, sizeof(word), [&](absl::Status) { ++small; });
  ASSERT_TRUE(ProgressUntil([&] { return small > 0; }, /*both=*/true));
  std::vector<uint8_t> src(4 << 20, 5);
  int calls = 0;
  absl::Status result;
  ops.Send(ep_, kAmId, {1}, src.data(), src.size(), [&](absl::Status s) {
    ++calls;
    result = s;
  });
  // The receiver is never progressed: a rendezvous waits for it forever.
  for (int i = 0; i < 1000; ++i) ucp_worker_progress(sender_);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(ops.size(), 1u);
  // As a transport does: close, destroy the worker (which may complete the
  // send with an error itself), then cancel what is left.
  CloseEp();
  ucp_worker_destroy(sender_);
  sender_ = nullptr;
  ops.CancelAll(absl::CancelledError("shut down"));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(ops.size(), 0u);
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
