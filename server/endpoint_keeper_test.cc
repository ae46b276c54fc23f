// EndpointKeeper: a healthy or unprobeable receive queue changes nothing; a
// wedged one is renewed (new address, re-joined under it); a failed renewal
// is an error. Against a real registry on loopback.
#include "server/endpoint_keeper.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "rpc/registry_client.h"
#include "server/test_registry.h"

namespace tessel {
namespace {

// A transport whose probe answers `probe` and whose Reset moves the address
// (or fails with `reset`). No data moves.
class FakeTransport : public Transport {
 public:
  std::string address() const override { return absl::StrCat("fake-", generation_); }
  void SetHandler(Handler) override {}
  absl::StatusOr<PeerId> Connect(absl::string_view) override {
    return absl::UnimplementedError("fake");
  }
  void Send(PeerId, absl::Span<const uint8_t>, const void*, size_t, SendDone done) override {
    if (done) done(absl::UnavailableError("fake"));
  }
  void Shutdown() override {}
  std::string name() const override { return "fake"; }
  absl::Status CheckReceiveQueue(absl::Duration) override { return probe; }
  absl::Status Reset() override {
    TESSEL_RETURN_IF_ERROR(reset);
    ++generation_;
    return absl::OkStatus();
  }

  absl::Status probe;
  absl::Status reset;

 private:
  int generation_ = 0;
};

class EndpointKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status started = registry_.Start();
    ASSERT_TRUE(started.ok()) << started;
    client_ = std::make_unique<RegistryClient>(registry_.address());
    member_.set_group("pool");
    member_.set_role(v1::ROLE_SERVER);
    member_.set_rank(0);
    member_.set_grpc_address("127.0.0.1:1");
    member_.set_ucx_address(transport_.address());
    auto view = client_->Join(member_, absl::Seconds(3));
    ASSERT_TRUE(view.ok()) << view.status();
    joined_epoch_ = view->epoch();
    keeper_ = std::make_unique<EndpointKeeper>(&transport_, client_.get(), member_,
                                               EndpointKeeperOptions{});
  }
  void TearDown() override {
    client_.reset();
    registry_.Stop();
  }
  v1::View View() {
    auto view = client_->GetView("pool");
    EXPECT_TRUE(view.ok()) << view.status();
    return view.ok() ? *view : v1::View();
  }

  FakeTransport transport_;
  TestRegistry registry_;
  std::unique_ptr<RegistryClient> client_;
  v1::Member member_;
  int64_t joined_epoch_ = 0;
  std::unique_ptr<EndpointKeeper> keeper_;
};

TEST_F(EndpointKeeperTest, HealthyOrUnprobeableQueueChangesNothing) {
  ASSERT_TRUE(keeper_->Check(nullptr).ok());
  transport_.probe = absl::UnimplementedError("fake transport cannot probe");
  ASSERT_TRUE(keeper_->Check(nullptr).ok());
  EXPECT_EQ(keeper_->renewals(), 0);
  v1::View view = View();
  EXPECT_EQ(view.epoch(), joined_epoch_);
  ASSERT_EQ(view.members_size(), 1);
  EXPECT_EQ(view.members(0).ucx_address(), "fake-0");
}

TEST_F(EndpointKeeperTest, WedgedQueueIsRenewedAndReJoined) {
  transport_.probe = absl::FailedPreconditionError("wedged");
  ASSERT_TRUE(keeper_->Check(nullptr).ok());
  EXPECT_EQ(keeper_->renewals(), 1);
  EXPECT_EQ(keeper_->member().ucx_address(), "fake-1");
  v1::View view = View();
  EXPECT_EQ(view.epoch(), joined_epoch_ + 2) << "a leave and a join";
  ASSERT_EQ(view.members_size(), 1);
  EXPECT_EQ(view.members(0).ucx_address(), "fake-1");
  EXPECT_EQ(view.members(0).grpc_address(), "127.0.0.1:1");
  EXPECT_TRUE(client_->lease_status().ok());
}

TEST_F(EndpointKeeperTest, NothingIsRenewedWhileStopping) {
  transport_.probe = absl::FailedPreconditionError("wedged");
  ASSERT_TRUE(keeper_->Check([] { return true; }).ok());
  EXPECT_EQ(keeper_->renewals(), 0);
  EXPECT_EQ(View().members(0).ucx_address(), "fake-0");
}

TEST_F(EndpointKeeperTest, FailedResetIsAnError) {
  transport_.probe = absl::FailedPreconditionError("wedged");
  transport_.reset = absl::UnavailableError("no new worker");
  absl::Status s = keeper_->Check(nullptr);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_NE(s.message().find("cannot re-create the UCX endpoint: no new worker"),
            absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace tessel
