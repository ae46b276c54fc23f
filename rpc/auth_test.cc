#include "rpc/auth.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/registry.grpc.pb.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "rpc/tls.h"

namespace tessel {
namespace {

using grpc::StatusCode;

constexpr char kAdmin[] = "tessel-admin-token-0123";
constexpr char kWorker[] = "tessel-worker-token-0123";
constexpr char kWorkerA[] = "tessel-worker-token-jobA";
constexpr char kServer[] = "tessel-server-token-0123";

TEST(ConstantTimeEqualsTest, Basics) {
  EXPECT_TRUE(ConstantTimeEquals("0123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdeX", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("X123456789abcdef", "0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcde", "0123456789abcdef"));    // prefix
  EXPECT_FALSE(ConstantTimeEquals("0123456789abcdef0", "0123456789abcdef"));  // longer
  // A repetition of the secret must not match (the loop wraps over the secret).
  EXPECT_FALSE(ConstantTimeEquals("abab", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", ""));  // no secret: nothing matches
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
}

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(TmpDir(), "/", name);
  std::ofstream(path) << text;
  return path;
}

TEST(ReadTokenFileTest, ReadsFirstLineTrimmed) {
  auto t = ReadTokenFile("--token_file", WriteFile("good", "  tessel-admin-token-0123 \nrest\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-admin-token-0123");
}

TEST(ReadTokenFileTest, TakesTheTokenOfAScopedLineAndSkipsComments) {
  auto t = ReadTokenFile(
      "--token_file",
      WriteFile("scoped", "# the token of job mlp\n\ntessel-worker-token-0123 mlp\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, "tessel-worker-token-0123");
}

TEST(ReadTokenFileTest, ShortOrMissingTokenIsRefused) {
  auto t = ReadTokenFile("--admin_token_file", WriteFile("short", "abc\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("at least 16 characters"), std::string::npos);
  t = ReadTokenFile("--admin_token_file", WriteFile("empty", "\n# nothing\n"));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = ReadTokenFile("--admin_token_file", "/nonexistent/token");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("--admin_token_file '/nonexistent/token'"), std::string::npos)
      << t.status();
}

TEST(ReadRoleTokenFileTest, TokensWithScopes) {
  auto t = ReadRoleTokenFile(
      "--worker_token_file",
      WriteFile("workers", absl::StrCat("# workers\n", kWorker, "\n", kWorkerA, "  jobA,jobB\n")),
      Role::kWorker);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].token, kWorker);
  EXPECT_TRUE((*t)[0].jobs.empty());
  EXPECT_EQ((*t)[1].token, kWorkerA);
  EXPECT_EQ((*t)[1].jobs, (std::vector<std::string>{"jobA", "jobB"}));
  EXPECT_EQ((*t)[1].role, Role::kWorker);
}

TEST(ReadRoleTokenFileTest, BadFilesAreNamed) {
  auto dup = ReadRoleTokenFile("--worker_token_file",
                               WriteFile("dup", absl::StrCat(kWorker, " a\n", kWorker, " b\n")),
                               Role::kWorker);
  ASSERT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("lists one token twice"), std::string::npos);
  auto scoped_server = ReadRoleTokenFile(
      "--server_token_file", WriteFile("srv", absl::StrCat(kServer, " jobA\n")), Role::kServer);
  ASSERT_EQ(scoped_server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(scoped_server.status().message().find("only worker tokens have a job scope"),
            std::string::npos);
  auto fields = ReadRoleTokenFile(
      "--worker_token_file", WriteFile("fields", absl::StrCat(kWorker, " a b\n")), Role::kWorker);
  ASSERT_EQ(fields.status().code(), absl::StatusCode::kInvalidArgument);
  auto short_token =
      ReadRoleTokenFile("--worker_token_file", WriteFile("w-short", "abc\n"), Role::kWorker);
  ASSERT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_token.status().message().find("--worker_token_file"), std::string::npos);
}

TEST(LoadAuthOptionsTest, OneTokenOneRole) {
  AuthFlags f;
  f.admin_token_file = WriteFile("admin", absl::StrCat(kAdmin, "\n"));
  f.worker_token_file = WriteFile("worker-is-admin", absl::StrCat(kAdmin, "\n"));
  auto o = LoadAuthOptions(f);
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--admin_token_file and --worker_token_file hold the same"),
            std::string::npos)
      << o.status();
  f.worker_token_file = WriteFile("worker", absl::StrCat(kWorker, "\n"));
  f.server_token_file = WriteFile("server-is-worker", absl::StrCat(kWorker, "\n"));
  EXPECT_FALSE(LoadAuthOptions(f).ok());
  f.server_token_file = WriteFile("server", absl::StrCat(kServer, "\n"));
  o = LoadAuthOptions(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->token, kAdmin);
  ASSERT_EQ(o->worker_tokens.size(), 1u);
  ASSERT_EQ(o->server_tokens.size(), 1u);
  EXPECT_EQ(o->server_tokens[0].role, Role::kServer);
}

TEST(LoadAuthOptionsTest, CertificateRolesNeedTls) {
  AuthFlags f;
  f.certificate_roles = true;
  auto o = LoadAuthOptions(f);
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--cert_roles"), std::string::npos);
  f.tls = true;
  EXPECT_TRUE(LoadAuthOptions(f).ok());
}

TEST(JobScopeTest, TheJobAndTheNamesTheSdkDerives) {
  EXPECT_TRUE(JobInScope("mlp", "mlp"));
  EXPECT_TRUE(JobInScope("mlp", "mlp~sync4.e3"));         // reducer helper job
  EXPECT_TRUE(JobInScope("mlp", "mlp.mesh"));             // hybrid mesh group
  EXPECT_TRUE(JobInScope("mlp", "mlp.p0.t1"));            // hybrid partition job
  EXPECT_TRUE(JobInScope("mlp", "mlp.p12.t3~sync8.e1"));  // its helper job
  EXPECT_FALSE(JobInScope("mlp", "mlp2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.v2"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.mesh~x"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.p.t1"));
  EXPECT_FALSE(JobInScope("mlp", "mlp.p1.t"));
  EXPECT_FALSE(JobInScope("mlp", "ml"));
  EXPECT_FALSE(JobInScope("mlp", "bert"));
  EXPECT_FALSE(JobInScope("", "mlp"));
  EXPECT_TRUE(IsHelperJob("mlp~sync4.e3"));
  EXPECT_TRUE(IsHelperJob("mlp.p0.t1~sync65536.e12"));
  EXPECT_FALSE(IsHelperJob("mlp"));
  EXPECT_FALSE(IsHelperJob("mlp~sync4"));
  EXPECT_FALSE(IsHelperJob("~sync4.e3"));
  EXPECT_FALSE(IsHelperJob("mlp~syncX.e3"));
}

// Every RPC of both services has a row: none is left unchecked.
TEST(RoleTableTest, EveryRpcHasARule) {
  for (const char* name : {"tessel.v1.ShardServer", "tessel.v1.Registry"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string rpc = service->method(i)->name();
      if (service->name() == "Registry" && rpc == "Join") {
        EXPECT_NE(RuleFor("Registry", "Join/SERVER"), nullptr);
        EXPECT_NE(RuleFor("Registry", "Join/WORKER"), nullptr);
        continue;
      }
      EXPECT_NE(RuleFor(service->name(), rpc), nullptr) << service->name() << "." << rpc;
    }
  }
  for (const RpcRule& r : RoleTable()) {
    EXPECT_FALSE(r.action.empty()) << r.rpc;
  }
}

Caller WithGrant(Role role, std::vector<std::string> jobs = {}) {
  Caller c;
  c.grants.push_back({role, std::move(jobs), "token"});
  return c;
}

AuthOptions Tokens() {
  AuthOptions o;
  o.token = kAdmin;
  o.allow_anonymous_reads = true;
  o.worker_tokens = {{kWorker, Role::kWorker, {}}, {kWorkerA, Role::kWorker, {"jobA"}}};
  return o;
}

// The role table, RPC by RPC, for each kind of caller on a shard server.
TEST(RoleTableTest, ShardServerDecisions) {
  const Authorizer auth(Tokens(), "this shard server");
  const Caller anonymous, admin = WithGrant(Role::kAdmin), worker = WithGrant(Role::kWorker),
                          scoped = WithGrant(Role::kWorker, {"jobA"}),
                          reader = WithGrant(Role::kReader), server = WithGrant(Role::kServer);
  struct Row {
    const char* rpc;
    StatusCode anonymous, worker, reader, server;
  };
  const StatusCode ok = StatusCode::OK, deny = StatusCode::PERMISSION_DENIED,
                   unauth = StatusCode::UNAUTHENTICATED;
  // allow_anonymous_reads = true: reads are open, everything else is not.
  for (const Row& row : std::vector<Row>{
           {"CreateJob", unauth, ok, deny, deny},
           {"SetEpoch", unauth, ok, deny, deny},
           {"SaveCheckpoint", unauth, ok, deny, deny},
           {"ReadState", unauth, ok, deny, deny},  // never anonymous
           {"WriteState", unauth, ok, deny, deny},
           {"GetStats", ok, ok, ok, ok},
           {"ListJobs", ok, ok, ok, ok},
           {"GetServerInfo", ok, ok, ok, ok},
           {"ListCheckpoints", ok, ok, ok, ok},
           {"GetCheckpoint", ok, ok, ok, ok},
           {"VerifyCheckpoint", ok, ok, ok, ok},
           {"DeleteJob", unauth, deny, deny, deny},
           {"DeleteCheckpoint", unauth, deny, deny, deny},
       }) {
    SCOPED_TRACE(row.rpc);
    EXPECT_EQ(auth.Check(anonymous, "ShardServer", row.rpc, "jobA").error_code(), row.anonymous);
    EXPECT_EQ(auth.Check(admin, "ShardServer", row.rpc, "jobA").error_code(), ok);
    EXPECT_EQ(auth.Check(worker, "ShardServer", row.rpc, "jobA").error_code(), row.worker);
    EXPECT_EQ(auth.Check(scoped, "ShardServer", row.rpc, "jobA").error_code(), row.worker);
    EXPECT_EQ(auth.Check(reader, "ShardServer", row.rpc, "jobA").error_code(), row.reader);
    EXPECT_EQ(auth.Check(server, "ShardServer", row.rpc, "jobA").error_code(), row.server);
  }
  // Without anonymous reads, the reads need a reader, worker or admin.
  AuthOptions closed = Tokens();
  closed.allow_anonymous_reads = false;
  const Authorizer strict(closed, "this shard server");
  EXPECT_EQ(strict.Check(anonymous, "ShardServer", "GetStats", "jobA").error_code(), unauth);
  EXPECT_EQ(strict.Check(reader, "ShardServer", "GetStats", "jobA").error_code(), ok);
  EXPECT_EQ(strict.Check(worker, "ShardServer", "ListJobs").error_code(), ok);
  EXPECT_EQ(strict.Check(server, "ShardServer", "GetStats", "jobA").error_code(), deny);
  EXPECT_EQ(strict.Check(server, "ShardServer", "GetServerInfo").error_code(), ok);
}

TEST(RoleTableTest, WorkerScope) {
  const Authorizer auth(Tokens(), "this shard server");
  const Caller scoped = WithGrant(Role::kWorker, {"jobA"});
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "CreateJob", "jobA").ok());
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "CreateJob", "jobA~sync4.e2").ok());
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "SaveCheckpoint", "jobA.p1.t0").ok());
  const grpc::Status other = auth.Check(scoped, "ShardServer", "CreateJob", "jobB");
  EXPECT_EQ(other.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(other.error_message().find("the worker credential for job 'jobA' (token) may not act "
                                       "on job 'jobB'"),
            std::string::npos)
      << other.error_message();
  // Reads anonymous callers may do are not narrowed by a scope...
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "GetStats", "jobB").ok());
  // ...but without anonymous reads a scoped worker reads only its jobs.
  AuthOptions closed = Tokens();
  closed.allow_anonymous_reads = false;
  const Authorizer strict(closed, "this shard server");
  EXPECT_EQ(strict.Check(scoped, "ShardServer", "GetStats", "jobB").error_code(),
            StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(strict.Check(scoped, "ShardServer", "GetStats", "jobA").ok());
  // A caller holding two grants passes with either.
  Caller two = scoped;
  two.grants.push_back({Role::kWorker, {"jobB"}, "certificate"});
  EXPECT_TRUE(auth.Check(two, "ShardServer", "CreateJob", "jobB").ok());
  EXPECT_TRUE(two.MayActOnJob("jobB~sync1.e1"));
  EXPECT_FALSE(two.MayActOnJob("jobC"));
}

TEST(RoleTableTest, RefusalsSayWhoMay) {
  const Authorizer auth(Tokens(), "this shard server");
  const grpc::Status s =
      auth.Check(WithGrant(Role::kWorker), "ShardServer", "DeleteCheckpoint", "mlp");
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("the worker credential (token) may not delete checkpoints (an "
                                   "admin credential may: tesselctl --token_file="),
            std::string::npos)
      << s.error_message();
  const grpc::Status anon = auth.Check(Caller(), "ShardServer", "ReadState", "mlp");
  EXPECT_EQ(anon.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_NE(anon.error_message().find("this shard server requires an admin or worker credential "
                                      "for ReadState: pass --token_file or set TESSEL_TOKEN"),
            std::string::npos)
      << anon.error_message();
  Caller bad;
  bad.bad_token = true;
  const grpc::Status wrong = auth.Check(bad, "ShardServer", "SetEpoch", "mlp");
  EXPECT_EQ(wrong.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(wrong.error_message().find("the token is not valid for this shard server"),
            std::string::npos);
  // A wrong token where anonymous callers pass: it passes as anonymous.
  EXPECT_TRUE(auth.Check(bad, "ShardServer", "GetStats", "mlp").ok());
  const grpc::Status restore =
      auth.Deny(WithGrant(Role::kWorker), "CreateJob", "restore the checkpoint of step 3", "how");
  EXPECT_EQ(restore.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(restore.error_message().find(
                "the worker credential (token) may not restore the checkpoint of step 3 (an "
                "admin credential may: how)"),
            std::string::npos)
      << restore.error_message();
}

TEST(RoleTableTest, NothingConfiguredAllowsEverything) {
  const Authorizer auth({}, "this shard server");
  EXPECT_FALSE(auth.enabled());
  for (const RpcRule& r : RoleTable()) {
    EXPECT_TRUE(auth.Check(Caller(), r.service, r.rpc, "job").ok()) << r.rpc;
  }
}

// The registry: member operations stay open until member credentials are
// configured, so a deployment with only an admin token works as before.
TEST(RoleTableTest, RegistryMemberOperations) {
  const Caller anonymous, worker_a = WithGrant(Role::kWorker, {"jobA"}),
                          server = WithGrant(Role::kServer), admin = WithGrant(Role::kAdmin);
  auto code = [](const Authorizer& a, const Caller& c, const char* rpc, const char* job = "") {
    return a.Check(c, "Registry", rpc, job).error_code();
  };
  const StatusCode ok = StatusCode::OK, deny = StatusCode::PERMISSION_DENIED,
                   unauth = StatusCode::UNAUTHENTICATED;

  AuthOptions admin_only;
  admin_only.token = kAdmin;
  admin_only.allow_anonymous_reads = false;
  const Authorizer a(admin_only, "this registry");
  for (const char* rpc : {"Join/SERVER", "Join/WORKER", "Heartbeat", "Leave", "GetView", "Watch"}) {
    EXPECT_EQ(code(a, anonymous, rpc, "jobB"), ok) << rpc;
  }
  EXPECT_EQ(code(a, anonymous, "ListGroups"), unauth);
  EXPECT_EQ(code(a, admin, "ListGroups"), ok);
  EXPECT_EQ(code(a, WithGrant(Role::kReader), "ListGroups"), ok);

  AuthOptions workers = admin_only;
  workers.worker_tokens = {{kWorkerA, Role::kWorker, {"jobA"}}};
  const Authorizer w(workers, "this registry");
  EXPECT_EQ(code(w, anonymous, "Join/WORKER", "jobA"), unauth);
  EXPECT_EQ(code(w, worker_a, "Join/WORKER", "jobA"), ok);
  EXPECT_EQ(code(w, worker_a, "Join/WORKER", "jobA.mesh"), ok);
  EXPECT_EQ(code(w, worker_a, "Join/WORKER", "jobB"), deny);
  EXPECT_EQ(code(w, admin, "Join/WORKER", "jobB"), ok);
  EXPECT_EQ(code(w, anonymous, "Join/SERVER"), ok);  // no server credentials yet
  EXPECT_EQ(code(w, anonymous, "GetView"), unauth);
  EXPECT_EQ(code(w, server, "GetView"), ok);
  EXPECT_EQ(code(w, anonymous, "Heartbeat"), ok);  // the lease id is the capability
  EXPECT_EQ(code(w, worker_a, "ListGroups"), deny);

  AuthOptions servers = admin_only;
  servers.server_tokens = {{kServer, Role::kServer, {}}};
  const Authorizer s(servers, "this registry");
  EXPECT_EQ(code(s, anonymous, "Join/SERVER"), unauth);
  EXPECT_EQ(code(s, worker_a, "Join/SERVER"), deny);
  EXPECT_EQ(code(s, server, "Join/SERVER"), ok);
  EXPECT_EQ(code(s, admin, "Join/SERVER"), ok);
  EXPECT_EQ(code(s, anonymous, "Join/WORKER", "jobA"), ok);  // no worker credentials yet
  EXPECT_EQ(code(s, server, "Join/WORKER", "jobA"), ok);

  AuthOptions certs;
  certs.certificate_roles = true;
  const Authorizer c(certs, "this registry");
  EXPECT_TRUE(c.enabled());
  EXPECT_EQ(code(c, anonymous, "Join/SERVER"), unauth);
  EXPECT_EQ(code(c, anonymous, "Join/WORKER", "jobA"), unauth);
  EXPECT_EQ(code(c, server, "Join/SERVER"), ok);
  EXPECT_EQ(code(c, worker_a, "Join/WORKER", "jobA"), ok);
  EXPECT_EQ(code(c, anonymous, "ListGroups"), ok);  // anonymous reads allowed (default)
}

TEST(IdentifyTokenTest, EachTokenItsRole) {
  AuthOptions o = Tokens();
  o.server_tokens = {{kServer, Role::kServer, {}}};
  const Authorizer auth(o, "s");
  Caller c = auth.IdentifyToken(absl::StrCat("Bearer ", kAdmin));
  ASSERT_EQ(c.grants.size(), 1u);
  EXPECT_EQ(c.grants[0].role, Role::kAdmin);
  c = auth.IdentifyToken(absl::StrCat("Bearer ", kWorkerA));
  ASSERT_EQ(c.grants.size(), 1u);
  EXPECT_EQ(c.grants[0].role, Role::kWorker);
  EXPECT_EQ(c.grants[0].jobs, std::vector<std::string>{"jobA"});
  c = auth.IdentifyToken(absl::StrCat("Bearer ", kServer));
  ASSERT_EQ(c.grants.size(), 1u);
  EXPECT_EQ(c.grants[0].role, Role::kServer);
  c = auth.IdentifyToken("Bearer tessel-nobody-token-00");
  EXPECT_TRUE(c.grants.empty());
  EXPECT_TRUE(c.bad_token);
  c = auth.IdentifyToken(kAdmin);  // no "Bearer "
  EXPECT_TRUE(c.grants.empty());
  EXPECT_TRUE(c.bad_token);
}

// Certificates from scripts/gen_certs.sh (with a job-scoped worker).
std::string CertDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(absl::StrCat(TmpDir(), "/auth_test_certs"));
    const std::string cmd = absl::StrCat("scripts/gen_certs.sh ", *d, " jobA > /dev/null");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return *dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CertificateRolesTest, SubjectOrganizationAndCommonName) {
  auto grants = [](const std::string& name) {
    return GrantsFromCertificate(ReadAll(absl::StrCat(CertDir(), "/", name, ".crt")));
  };
  auto admin = grants("admin");
  ASSERT_EQ(admin.size(), 1u);
  EXPECT_EQ(admin[0].role, Role::kAdmin);
  EXPECT_NE(admin[0].source.find("O=tessel:admin"), std::string::npos) << admin[0].source;
  auto worker = grants("worker");
  ASSERT_EQ(worker.size(), 1u);
  EXPECT_EQ(worker[0].role, Role::kWorker);
  EXPECT_TRUE(worker[0].jobs.empty());
  auto scoped = grants("worker-jobA");
  ASSERT_EQ(scoped.size(), 1u);
  EXPECT_EQ(scoped[0].jobs, std::vector<std::string>{"jobA"});
  ASSERT_EQ(grants("server-role").size(), 1u);
  EXPECT_EQ(grants("server-role")[0].role, Role::kServer);
  EXPECT_EQ(grants("reader")[0].role, Role::kReader);
  EXPECT_TRUE(grants("client").empty());  // no O: no role
  EXPECT_TRUE(grants("server").empty());
  EXPECT_TRUE(GrantsFromCertificate("not a certificate").empty());
}

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

}  // namespace
}  // namespace tessel
