// The endpoint calls against the real UCX: two workers of one context in
// this thread, an endpoint between them over shared memory, a payload region
// of one read through the remote key unpacked on the endpoint.
#include "transport/ucx/internal/endpoints.h"

#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "transport/ucx/internal/context.h"
#include "transport/ucx/internal/payload_memory.h"
#include "transport/ucx/internal/ucp_testing.h"

namespace tessel {
namespace ucx_internal {
namespace {

void OnError(void*, ucp_ep_h, ucs_status_t) {}

TEST(EndpointParamsTest, ErrorModeAndHandlerAsAsked) {
  const std::string address = "addr";
  ucp_ep_params_t none = EndpointParams(address, false, nullptr, nullptr);
  EXPECT_EQ(none.err_mode, UCP_ERR_HANDLING_MODE_NONE);
  EXPECT_EQ(none.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER, 0u);
  EXPECT_EQ(reinterpret_cast<const char*>(none.address), address.data());
  int arg = 0;
  ucp_ep_params_t peer = EndpointParams(address, true, &OnError, &arg);
  EXPECT_EQ(peer.err_mode, UCP_ERR_HANDLING_MODE_PEER);
  EXPECT_NE(peer.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER, 0u);
  EXPECT_EQ(peer.err_handler.cb, &OnError);
  EXPECT_EQ(peer.err_handler.arg, &arg);
}

class EndpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    context_ = TestContext();
    ASSERT_NE(context_, nullptr);
    from_ = TestWorker(context_->get());
    to_ = TestWorker(context_->get());
    ASSERT_TRUE(from_ != nullptr && to_ != nullptr);
    address_ = WorkerAddress(to_);
    ucp_ep_params_t params = EndpointParams(address_, false, nullptr, nullptr);
    ASSERT_EQ(ucp_ep_create(from_, &params, &ep_), UCS_OK);
  }
  void TearDown() override {
    if (ep_ != nullptr) {
      CloseLater(ep_);
      for (int i = 0; i < 1000; ++i) {
        ucp_worker_progress(from_);
        ucp_worker_progress(to_);
      }
    }
    if (from_ != nullptr) ucp_worker_destroy(from_);
    if (to_ != nullptr) ucp_worker_destroy(to_);
  }

  std::shared_ptr<UcxContext> context_;
  ucp_worker_h from_ = nullptr;
  ucp_worker_h to_ = nullptr;
  std::string address_;
  ucp_ep_h ep_ = nullptr;
};

TEST_F(EndpointsTest, LanesBetweenTwoWorkersOfOneHostMapMemory) {
  const EpLanes lanes = LanesOf(ep_);
  EXPECT_FALSE(lanes.am.empty());
  EXPECT_TRUE(lanes.mappable) << "posix or sysv between two workers of this process";
}

TEST_F(EndpointsTest, ARemoteKeyUnpackedOnTheEndpointMapsTheRegion) {
  UcxPayloadMemory memory(context_);
  const size_t n = 4096;
  auto* region = static_cast<char*>(memory.Allocate(n));
  ASSERT_NE(region, nullptr);
  std::memcpy(region, "in place", 9);
  auto found = memory.Find(region, n);
  ASSERT_TRUE(found.has_value());
  std::unique_ptr<RemoteKeyOps> ops = MakeUcpRemoteKeyOps();
  absl::StatusOr<void*> rkey =
      ops->Unpack(ep_, absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(found->rkey->data()),
                                           found->rkey->size()));
  ASSERT_TRUE(rkey.ok()) << rkey.status();
  char* mapped = ops->Map(*rkey, found->base);
  ASSERT_NE(mapped, nullptr);
  EXPECT_STREQ(mapped, "in place");
  ops->Destroy(*rkey);
  EXPECT_TRUE(memory.Free(region));
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
