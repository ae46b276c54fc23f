// Authorizer (rpc/auth.h), the gRPC adapter of AccessPolicy: tokens and
// client certificates read from a real in-process gRPC server, and
// AccessPolicy's decisions returned as grpc::Status.
#include "rpc/auth.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/registry.grpc.pb.h"
#include "rpc/auth_testing.h"
#include "rpc/grpc_util.h"
#include "rpc/tls.h"

namespace tessel {
namespace {

using auth_testing::CertDir;
using auth_testing::kAdmin;
using auth_testing::kWorker;
using auth_testing::kWorkerA;
using auth_testing::Tokens;
using grpc::StatusCode;

// Carries a check through a real in-process gRPC server, so what it reads
// (metadata, the peer certificate in the AuthContext) is what a client
// really sends. GetView's group names the check: "SERVICE RPC [JOB]".
class CheckService final : public v1::Registry::Service {
 public:
  explicit CheckService(AuthOptions o) : auth_(std::move(o), "this test service") {}
  grpc::Status GetView(grpc::ServerContext* ctx, const v1::GetViewRequest* req,
                       v1::GetViewResponse*) override {
    std::vector<std::string> f = absl::StrSplit(req->group(), ' ');
    f.resize(3);
    return auth_.Check(*ctx, f[0], f[1], f[2]);
  }

 private:
  const Authorizer auth_;
};

class Harness {
 public:
  Harness(AuthOptions o, const TlsOptions& server_tls) : service_(std::move(o)) {
    auto creds = LoadServerCredentials(server_tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    auto server = StartGrpcServer("127.0.0.1:0", {&service_}, &address_, *creds);
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  ~Harness() { server_->Shutdown(absl::ToChronoTime(absl::Now())); }

  grpc::Status Call(const std::string& check, const std::string& token,
                    const TlsOptions& client_tls = {}) {
    auto creds = LoadClientCredentials(client_tls);
    EXPECT_TRUE(creds.ok()) << creds.status();
    // Dial "localhost" under TLS: the certificates name it.
    const std::string address =
        client_tls.enabled() ? absl::StrCat("localhost:", address_.substr(address_.rfind(':') + 1))
                             : address_;
    auto stub = v1::Registry::NewStub(MakeChannel(address, *creds));
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    AddToken(&ctx, token);
    v1::GetViewRequest req;
    req.set_group(check);
    v1::GetViewResponse resp;
    return stub->GetView(&ctx, req, &resp);
  }

 private:
  CheckService service_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
};

TEST(AuthorizerTest, TokensOverGrpc) {
  AuthOptions o = Tokens();
  o.allow_anonymous_reads = false;
  Harness h(o, {});
  EXPECT_EQ(h.Call("ShardServer DeleteCheckpoint mlp", "").error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(h.Call("ShardServer DeleteCheckpoint mlp", kWorker).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.Call("ShardServer DeleteCheckpoint mlp", kAdmin).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("ShardServer ReadState mlp", kWorker).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("ShardServer ReadState jobB", kWorkerA).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.Call("ShardServer ReadState jobA", kWorkerA).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("Registry ListGroups", "tessel-admin-token-0124").error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.Call("Registry ListGroups", kAdmin).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("Registry Heartbeat", "").error_code(), StatusCode::OK);
}

TEST(AuthorizerTest, CertificateRolesOverMutualTls) {
  auto pair = [](const std::string& name) {
    TlsOptions t;
    t.ca_file = absl::StrCat(CertDir(), "/ca.crt");
    t.cert_file = absl::StrCat(CertDir(), "/", name, ".crt");
    t.key_file = absl::StrCat(CertDir(), "/", name, ".key");
    return t;
  };
  AuthOptions o;
  o.certificate_roles = true;
  o.allow_anonymous_reads = false;
  Harness h(o, pair("server-role"));
  const std::string del = "ShardServer DeleteCheckpoint jobA";
  EXPECT_EQ(h.Call(del, "", pair("admin")).error_code(), StatusCode::OK);
  const grpc::Status worker = h.Call(del, "", pair("worker"));
  EXPECT_EQ(worker.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(worker.error_message().find("certificate CN=tessel-worker, O=tessel:worker"),
            std::string::npos)
      << worker.error_message();
  EXPECT_EQ(h.Call("ShardServer CreateJob jobA", "", pair("worker-jobA")).error_code(),
            StatusCode::OK);
  EXPECT_EQ(h.Call("ShardServer CreateJob jobB", "", pair("worker-jobA")).error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h.Call("ShardServer CreateJob jobB", "", pair("worker")).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("Registry Join/SERVER", "", pair("server-role")).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("Registry Join/SERVER", "", pair("worker")).error_code(),
            StatusCode::PERMISSION_DENIED);
  // A certificate without a role is a stranger to the table.
  EXPECT_EQ(h.Call("ShardServer GetStats jobA", "", pair("client")).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(h.Call("Registry ListGroups", "", pair("reader")).error_code(), StatusCode::OK);
}

// The bug of job scopes that did not know parameter groups: a worker token
// scoped to "mlp" must let tessel.torch's two-group optimizer create "mlp"
// and "mlp.g1" (and the groups' helper jobs), and nothing else.
TEST(AuthorizerTest, ScopedWorkerTokenCoversParameterGroups) {
  AuthOptions o;
  o.worker_tokens = {{kWorkerA, Role::kWorker, {"mlp"}}};
  const Authorizer auth(o, "this shard server");
  const Caller c = auth.IdentifyToken(absl::StrCat("Bearer ", kWorkerA));
  EXPECT_TRUE(auth.Check(c, "ShardServer", "CreateJob", "mlp").ok());
  EXPECT_TRUE(auth.Check(c, "ShardServer", "CreateJob", "mlp.g1").ok());
  EXPECT_TRUE(auth.Check(c, "ShardServer", "CreateJob", "mlp.g1~sync8.e1").ok());
  const grpc::Status other = auth.Check(c, "ShardServer", "CreateJob", "mlp2");
  EXPECT_EQ(other.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(other.error_message().find("may not act on job 'mlp2'"), std::string::npos)
      << other.error_message();
  Harness h(o, {});
  EXPECT_EQ(h.Call("ShardServer CreateJob mlp.g1", kWorkerA).error_code(), StatusCode::OK);
  EXPECT_EQ(h.Call("ShardServer CreateJob mlp2", kWorkerA).error_code(),
            StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace tessel
