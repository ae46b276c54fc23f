// RegistryService over a real in-process gRPC server: with credentials
// configured, a lease is renewed (Heartbeat) and ended (Leave) only by the
// credential that joined with it; with none, anonymous members keep working.
#include "registry/registry_service.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "proto/registry.grpc.pb.h"
#include "rpc/auth.h"
#include "rpc/grpc_util.h"

namespace tessel {
namespace {

using grpc::StatusCode;

constexpr char kAdmin[] = "tessel-admin-token-registry-0";
constexpr char kWorkerA[] = "tessel-worker-token-job-A-000";
constexpr char kWorkerB[] = "tessel-worker-token-job-B-000";

class Harness {
 public:
  explicit Harness(AuthOptions auth) : service_(absl::Seconds(30), std::move(auth)) {
    auto server = StartGrpcServer("127.0.0.1:0", {&service_}, &address_);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = v1::Registry::NewStub(MakeChannel(address_));
  }
  ~Harness() {
    service_.Stop();
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  absl::StatusOr<int64_t> Join(const std::string& group, const std::string& token, int rank = 0,
                               const std::string& pod = "", int64_t ttl_ms = 0) {
    v1::JoinRequest req;
    req.mutable_member()->set_group(group);
    req.mutable_member()->set_role(v1::ROLE_WORKER);
    req.mutable_member()->set_rank(rank);
    req.mutable_member()->set_pod(pod);
    req.set_lease_ttl_ms(ttl_ms);
    v1::JoinResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AddToken(&ctx, token);
    grpc::Status s = stub_->Join(&ctx, req, &resp);
    if (!s.ok()) return absl::UnknownError(s.error_message());
    return resp.lease_id();
  }
  grpc::Status Heartbeat(int64_t lease, const std::string& token,
                         const v1::StepPhases* phases = nullptr) {
    v1::HeartbeatRequest req;
    req.set_lease_id(lease);
    if (phases != nullptr) *req.mutable_phases() = *phases;
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AddToken(&ctx, token);
    return stub_->Heartbeat(&ctx, req, &resp);
  }
  grpc::Status Leave(int64_t lease, const std::string& token) {
    v1::LeaveRequest req;
    req.set_lease_id(lease);
    v1::LeaveResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AddToken(&ctx, token);
    return stub_->Leave(&ctx, req, &resp);
  }
  absl::StatusOr<v1::View> GetView(const std::string& group, bool liveness = true) {
    v1::GetViewRequest req;
    req.set_group(group);
    req.set_liveness(liveness);
    v1::GetViewResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    grpc::Status s = stub_->GetView(&ctx, req, &resp);
    if (!s.ok()) return absl::UnknownError(s.error_message());
    return resp.view();
  }
  absl::StatusOr<v1::View> Stored(const std::string& group) {
    return service_.registry().GetView(group);
  }
  int Members(const std::string& group) {
    auto view = service_.registry().GetView(group);
    return view.ok() ? view->members_size() : -1;
  }

 private:
  RegistryService service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Registry::Stub> stub_;
};

// Issue 42, part 5: Leave took any lease id, so job B's worker (or anyone)
// could end job A's members' memberships.
TEST(RegistryServiceTest, OnlyTheJoiningCredentialRenewsOrEndsALease) {
  AuthOptions auth;
  auth.token = kAdmin;
  auth.worker_tokens = {{kWorkerA, Role::kWorker, {"A"}}, {kWorkerB, Role::kWorker, {"B"}}};
  Harness h(auth);
  absl::StatusOr<int64_t> lease = h.Join("A", kWorkerA);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_EQ(h.Members("A"), 1);

  const grpc::Status leave = h.Leave(*lease, kWorkerB);
  EXPECT_EQ(leave.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(leave.error_message().find("only the credential that joined with a lease"),
            std::string::npos)
      << leave.error_message();
  EXPECT_EQ(h.Leave(*lease, "").error_code(), StatusCode::PERMISSION_DENIED);  // anonymous
  EXPECT_EQ(h.Heartbeat(*lease, kWorkerB).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.Members("A"), 1) << "a refused Leave removed the member";

  EXPECT_TRUE(h.Heartbeat(*lease, kWorkerA).ok());
  EXPECT_TRUE(h.Leave(*lease, kWorkerA).ok());
  EXPECT_EQ(h.Members("A"), 0);

  // The operator may end any member's lease.
  lease = h.Join("A", kWorkerA);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(h.Leave(*lease, kAdmin).ok());
  EXPECT_EQ(h.Members("A"), 0);
}

TEST(RegistryServiceTest, AnonymousMembersKeepWorkingWithoutCredentials) {
  Harness h(AuthOptions{});
  absl::StatusOr<int64_t> lease = h.Join("A", "");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(h.Heartbeat(*lease, "").ok());
  EXPECT_TRUE(h.Leave(*lease, "").ok());
  EXPECT_EQ(h.Members("A"), 0);
}

// Credentials configured for shard servers only: workers join anonymously
// (Join/WORKER stays open), and renew and end their leases anonymously.
TEST(RegistryServiceTest, AnonymousJoinersRenewAnonymously) {
  AuthOptions auth;
  auth.token = kAdmin;
  Harness h(auth);
  absl::StatusOr<int64_t> lease = h.Join("A", "");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(h.Heartbeat(*lease, "").ok());
  EXPECT_TRUE(h.Leave(*lease, "").ok());
}

// tesselctl top and why: GetView's workers carry their last heartbeat here,
// when their lease lapses and their last step's phases, and their pod; the
// registry's stored view does not.
TEST(RegistryServiceTest, GetViewCarriesEachWorkersLivenessAndPod) {
  Harness h(AuthOptions{});
  const int64_t before = absl::ToUnixMillis(absl::Now());
  absl::StatusOr<int64_t> a = h.Join("J", "", 0, "train-0", /*ttl_ms=*/4000);
  absl::StatusOr<int64_t> b = h.Join("J", "", 1);
  ASSERT_TRUE(a.ok() && b.ok());
  v1::StepPhases phases;
  phases.set_step(12);
  phases.set_compute_ns(300);
  ASSERT_TRUE(h.Heartbeat(*a, "", &phases).ok());
  absl::StatusOr<v1::View> view = h.GetView("J");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->members_size(), 2);
  const v1::Member& m0 = view->members(0);
  EXPECT_EQ(m0.pod(), "train-0");
  EXPECT_GE(m0.liveness().last_heartbeat_unix_ms(), before);
  EXPECT_EQ(m0.liveness().lease_expires_unix_ms(), m0.liveness().last_heartbeat_unix_ms() + 4000);
  EXPECT_EQ(m0.liveness().phases().step(), 12);
  EXPECT_EQ(m0.liveness().phases().compute_ns(), 300);
  const v1::Member& m1 = view->members(1);
  EXPECT_GE(m1.liveness().last_heartbeat_unix_ms(), before) << "its join counts";
  EXPECT_FALSE(m1.liveness().has_phases()) << "no step reported";
  absl::StatusOr<v1::View> plain = h.GetView("J", /*liveness=*/false);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->members(0).has_liveness()) << "only when asked for";
  EXPECT_EQ(plain->members(0).pod(), "train-0");
  auto stored = h.Stored("J");
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->members(0).has_liveness()) << "decorates answers only";
  ASSERT_TRUE(h.Leave(*a, "").ok());
  view = h.GetView("J");
  ASSERT_TRUE(view.ok());
  ASSERT_EQ(view->members_size(), 1);
  EXPECT_EQ(view->members(0).rank(), 1);
}

}  // namespace
}  // namespace tessel
