// AccessPolicy (rpc/access_policy.h): the role table's decisions for every
// kind of caller, worker scopes, refusal messages, the registry's member
// operations, and tokens identified, all on plain values (no gRPC).
#include "rpc/access_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/auth_testing.h"

namespace tessel {
namespace {

using auth_testing::kAdmin;
using auth_testing::kServer;
using auth_testing::kWorker;
using auth_testing::kWorkerA;
using auth_testing::Tokens;
using StatusCode = absl::StatusCode;

Caller WithGrant(Role role, std::vector<std::string> jobs = {}) {
  Caller c;
  c.grants.push_back({role, std::move(jobs), "token", "token sha256:00"});
  return c;
}

// The role table, RPC by RPC, for each kind of caller on a shard server.
TEST(AccessPolicyTest, ShardServerDecisions) {
  const AccessPolicy auth(Tokens(), "this shard server");
  const Caller anonymous, admin = WithGrant(Role::kAdmin), worker = WithGrant(Role::kWorker),
                          scoped = WithGrant(Role::kWorker, {"jobA"}),
                          reader = WithGrant(Role::kReader), server = WithGrant(Role::kServer);
  struct Row {
    const char* rpc;
    StatusCode anonymous, worker, reader, server;
  };
  const StatusCode ok = StatusCode::kOk, deny = StatusCode::kPermissionDenied,
                   unauth = StatusCode::kUnauthenticated;
  // allow_anonymous_reads = true: reads are open, everything else is not.
  for (const Row& row : std::vector<Row>{
           {"CreateJob", unauth, ok, deny, deny},
           {"SetEpoch", unauth, ok, deny, deny},
           {"GetFrameKey", unauth, ok, deny, deny},  // a job's data-path key: its workers only
           {"GetMeshKey", unauth, ok, deny, deny},   // a hybrid job's mesh key: the same
           {"SaveCheckpoint", unauth, ok, deny, deny},
           {"ReadState", unauth, ok, deny, deny},  // never anonymous
           {"WriteState", unauth, ok, deny, deny},
           {"GetStats", ok, ok, ok, ok},
           {"ListJobs", ok, ok, ok, ok},
           {"GetServerInfo", ok, ok, ok, ok},
           {"ListCheckpoints", ok, ok, ok, ok},
           {"GetCheckpoint", ok, ok, ok, ok},
           {"VerifyCheckpoint", ok, ok, ok, ok},
           {"ReadCheckpoint", unauth, ok, deny, deny},  // a model's parameters: never anonymous
           {"DeleteJob", unauth, deny, deny, deny},
           {"DeleteCheckpoint", unauth, deny, deny, deny},
       }) {
    SCOPED_TRACE(row.rpc);
    EXPECT_EQ(auth.Check(anonymous, "ShardServer", row.rpc, "jobA").code(), row.anonymous);
    EXPECT_EQ(auth.Check(admin, "ShardServer", row.rpc, "jobA").code(), ok);
    EXPECT_EQ(auth.Check(worker, "ShardServer", row.rpc, "jobA").code(), row.worker);
    EXPECT_EQ(auth.Check(scoped, "ShardServer", row.rpc, "jobA").code(), row.worker);
    EXPECT_EQ(auth.Check(reader, "ShardServer", row.rpc, "jobA").code(), row.reader);
    EXPECT_EQ(auth.Check(server, "ShardServer", row.rpc, "jobA").code(), row.server);
  }
  // Without anonymous reads, the reads need a reader, worker or admin.
  AuthOptions closed = Tokens();
  closed.allow_anonymous_reads = false;
  const AccessPolicy strict(closed, "this shard server");
  EXPECT_EQ(strict.Check(anonymous, "ShardServer", "GetStats", "jobA").code(), unauth);
  EXPECT_EQ(strict.Check(reader, "ShardServer", "GetStats", "jobA").code(), ok);
  EXPECT_EQ(strict.Check(worker, "ShardServer", "ListJobs").code(), ok);
  EXPECT_EQ(strict.Check(server, "ShardServer", "GetStats", "jobA").code(), deny);
  EXPECT_EQ(strict.Check(server, "ShardServer", "GetServerInfo").code(), ok);
}

TEST(AccessPolicyTest, WorkerScope) {
  const AccessPolicy auth(Tokens(), "this shard server");
  const Caller scoped = WithGrant(Role::kWorker, {"jobA"});
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "CreateJob", "jobA").ok());
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "CreateJob", "jobA~sync4.e2").ok());
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "SaveCheckpoint", "jobA.p1.t0").ok());
  const absl::Status other = auth.Check(scoped, "ShardServer", "CreateJob", "jobB");
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  // A job's data-path key: a worker of job A gets A's (and its parameter
  // groups' and helper jobs'), never B's.
  EXPECT_EQ(auth.Check(scoped, "ShardServer", "GetFrameKey", "jobB").code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "GetFrameKey", "jobA").ok());
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "GetFrameKey", "jobA.g2~sync8.e1").ok());
  // A hybrid job's mesh key: only for its own job's mesh.
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "GetMeshKey", "jobA.mesh").ok());
  EXPECT_EQ(auth.Check(scoped, "ShardServer", "GetMeshKey", "jobB.mesh").code(),
            StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("the worker credential for job 'jobA' (token) may not act "
                                 "on job 'jobB'"),
            std::string::npos)
      << other.message();
  // Reads anonymous callers may do are not narrowed by a scope...
  EXPECT_TRUE(auth.Check(scoped, "ShardServer", "GetStats", "jobB").ok());
  // ...but without anonymous reads a scoped worker reads only its jobs.
  AuthOptions closed = Tokens();
  closed.allow_anonymous_reads = false;
  const AccessPolicy strict(closed, "this shard server");
  EXPECT_EQ(strict.Check(scoped, "ShardServer", "GetStats", "jobB").code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(strict.Check(scoped, "ShardServer", "GetStats", "jobA").ok());
  // A caller holding two grants passes with either.
  Caller two = scoped;
  two.grants.push_back({Role::kWorker, {"jobB"}, "certificate", "certificate CN=worker:jobB"});
  EXPECT_TRUE(auth.Check(two, "ShardServer", "CreateJob", "jobB").ok());
  EXPECT_TRUE(two.MayActOnJob("jobB~sync1.e1"));
  EXPECT_FALSE(two.MayActOnJob("jobC"));
}

TEST(AccessPolicyTest, RefusalsSayWhoMay) {
  const AccessPolicy auth(Tokens(), "this shard server");
  const absl::Status s =
      auth.Check(WithGrant(Role::kWorker), "ShardServer", "DeleteCheckpoint", "mlp");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("the worker credential (token) may not delete checkpoints (an "
                             "admin credential may: tesselctl --token_file="),
            std::string::npos)
      << s.message();
  const absl::Status anon = auth.Check(Caller(), "ShardServer", "ReadState", "mlp");
  EXPECT_EQ(anon.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(anon.message().find("this shard server requires an admin or worker credential "
                                "for ReadState: pass --token_file or set TESSEL_TOKEN"),
            std::string::npos)
      << anon.message();
  Caller bad;
  bad.bad_token = true;
  const absl::Status wrong = auth.Check(bad, "ShardServer", "SetEpoch", "mlp");
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(wrong.message().find("the token is not valid for this shard server"),
            std::string::npos);
  // A wrong token where anonymous callers pass: it passes as anonymous.
  EXPECT_TRUE(auth.Check(bad, "ShardServer", "GetStats", "mlp").ok());
  const absl::Status restore =
      auth.Deny(WithGrant(Role::kWorker), "CreateJob", "restore the checkpoint of step 3", "how");
  EXPECT_EQ(restore.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(restore.message().find(
                "the worker credential (token) may not restore the checkpoint of step 3 (an "
                "admin credential may: how)"),
            std::string::npos)
      << restore.message();
}

TEST(AccessPolicyTest, NothingConfiguredAllowsEverything) {
  const AccessPolicy auth({}, "this shard server");
  EXPECT_FALSE(auth.enabled());
  for (const RpcRule& r : RoleTable()) {
    EXPECT_TRUE(auth.Check(Caller(), r.service, r.rpc, "job").ok()) << r.rpc;
  }
}

// The registry: member operations stay open until member credentials are
// configured, so a deployment with only an admin token works as before.
TEST(AccessPolicyTest, RegistryMemberOperations) {
  const Caller anonymous, worker_a = WithGrant(Role::kWorker, {"jobA"}),
                          server = WithGrant(Role::kServer), admin = WithGrant(Role::kAdmin);
  auto code = [](const AccessPolicy& a, const Caller& c, const char* rpc, const char* job = "") {
    return a.Check(c, "Registry", rpc, job).code();
  };
  const StatusCode ok = StatusCode::kOk, deny = StatusCode::kPermissionDenied,
                   unauth = StatusCode::kUnauthenticated;

  AuthOptions admin_only;
  admin_only.token = kAdmin;
  admin_only.allow_anonymous_reads = false;
  const AccessPolicy a(admin_only, "this registry");
  for (const char* rpc : {"Join/SERVER", "Join/WORKER", "Heartbeat", "Leave", "GetView", "Watch"}) {
    EXPECT_EQ(code(a, anonymous, rpc, "jobB"), ok) << rpc;
  }
  EXPECT_EQ(code(a, anonymous, "ListGroups"), unauth);
  EXPECT_EQ(code(a, admin, "ListGroups"), ok);
  EXPECT_EQ(code(a, WithGrant(Role::kReader), "ListGroups"), ok);

  AuthOptions workers = admin_only;
  workers.worker_tokens = {{kWorkerA, Role::kWorker, {"jobA"}}};
  const AccessPolicy w(workers, "this registry");
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
  const AccessPolicy s(servers, "this registry");
  EXPECT_EQ(code(s, anonymous, "Join/SERVER"), unauth);
  EXPECT_EQ(code(s, worker_a, "Join/SERVER"), deny);
  EXPECT_EQ(code(s, server, "Join/SERVER"), ok);
  EXPECT_EQ(code(s, admin, "Join/SERVER"), ok);
  EXPECT_EQ(code(s, anonymous, "Join/WORKER", "jobA"), ok);  // no worker credentials yet
  EXPECT_EQ(code(s, server, "Join/WORKER", "jobA"), ok);

  AuthOptions certs;
  certs.certificate_roles = true;
  const AccessPolicy c(certs, "this registry");
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
  const AccessPolicy auth(o, "s");
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

// tessel.torch's two-group optimizer trains jobs "J" and "J.g1" (and their
// helper jobs): a worker token scoped to J may create them all, and nothing
// else.
TEST(AccessPolicyTest, ScopedWorkerTokenCreatesTheJobsGroups) {
  AuthOptions o;
  o.worker_tokens = {{kWorkerA, Role::kWorker, {"mlp"}}};
  const AccessPolicy policy(o, "this shard server");
  const Caller c = policy.IdentifyToken(absl::StrCat("Bearer ", kWorkerA));
  EXPECT_TRUE(policy.Check(c, "ShardServer", "CreateJob", "mlp").ok());
  EXPECT_TRUE(policy.Check(c, "ShardServer", "CreateJob", "mlp.g1").ok());
  EXPECT_TRUE(policy.Check(c, "ShardServer", "CreateJob", "mlp.g1~sync8.e1").ok());
  EXPECT_TRUE(policy.Check(c, "Registry", "Join/WORKER", "mlp.g1").ok());
  const absl::Status other = policy.Check(c, "ShardServer", "CreateJob", "mlp2");
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("the worker credential for job 'mlp' (token) may not act on "
                                 "job 'mlp2'"),
            std::string::npos)
      << other.message();
}

// Issue 42, part 5: the tenants' rule in Check. A token's identity is a
// fingerprint, stable, different per token, never the token.
TEST(AccessPolicyTest, DerivedNamesOfAnotherCreatorAreRefused) {
  AuthOptions o;
  o.worker_tokens = {{kWorkerA, Role::kWorker, {"mlp"}}, {kWorker, Role::kWorker, {"mlp.g1"}}};
  o.allow_anonymous_reads = true;
  const AccessPolicy policy(o, "this shard server");
  const Caller a = policy.IdentifyToken(absl::StrCat("Bearer ", kWorkerA));
  const Caller x = policy.IdentifyToken(absl::StrCat("Bearer ", kWorker));
  EXPECT_EQ(a.Identity(), TokenIdentity(kWorkerA));
  EXPECT_EQ(a.Identity().rfind("token sha256:", 0), 0u);
  EXPECT_EQ(a.Identity().size(), std::string("token sha256:").size() + 32);
  EXPECT_EQ(a.Identity().find(kWorkerA), std::string::npos);
  EXPECT_NE(a.Identity(), x.Identity());

  EXPECT_TRUE(policy.Check(a, "ShardServer", "ReadState", "mlp.g1").ok());  // none exists
  EXPECT_TRUE(policy.Check(a, "ShardServer", "ReadState", "mlp.g1", a.Identity()).ok());
  const absl::Status other = policy.Check(a, "ShardServer", "ReadState", "mlp.g1", x.Identity());
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("this shard server refuses ReadState of job 'mlp.g1': the worker "
                                 "credential for job 'mlp' (token) reaches a name derived from "
                                 "its job only where that credential created it, and job "
                                 "'mlp.g1' was created by another credential; use the "
                                 "credential of job 'mlp.g1'"),
            std::string::npos)
      << other.message();
  EXPECT_EQ(other.message().find(kWorker), std::string::npos) << "a token in a message";
  const absl::Status unknown = policy.Check(a, "ShardServer", "ReadState", "mlp.g1", "");
  EXPECT_EQ(unknown.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(unknown.message().find("no creator is recorded"), std::string::npos)
      << unknown.message();
  // The owner of "mlp.g1" by name, and anonymous reads where they are open.
  EXPECT_TRUE(policy.Check(x, "ShardServer", "ReadState", "mlp.g1", a.Identity()).ok());
  EXPECT_TRUE(policy.Check(a, "ShardServer", "GetStats", "mlp.g1", x.Identity()).ok());
}

TEST(AccessPolicyTest, NeedsCredentialOnlyWhereTheTableIsEnforced) {
  EXPECT_FALSE(AccessPolicy({}, "s").NeedsCredential("ShardServer", "CreateJob"));
  AuthOptions o;
  o.token = kAdmin;
  const AccessPolicy policy(o, "s");
  EXPECT_TRUE(policy.NeedsCredential("ShardServer", "CreateJob"));
  EXPECT_FALSE(policy.NeedsCredential("ShardServer", "GetStats"));  // anonymous reads
  EXPECT_FALSE(policy.NeedsCredential("Registry", "Heartbeat"));
  EXPECT_TRUE(policy.NeedsCredential("ShardServer", "NoSuchRpc"));  // refused by Check
}

}  // namespace
}  // namespace tessel
