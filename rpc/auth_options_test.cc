// LoadAuthOptions (rpc/auth_options.h): the flags' files checked as a whole.
#include "rpc/auth_options.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/auth_testing.h"

namespace tessel {
namespace {

using auth_testing::kAdmin;
using auth_testing::kServer;
using auth_testing::kWorker;
using auth_testing::WriteFile;

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

TEST(SecurityPostureTest, NoCredentialsRefusedWithoutInsecure) {
  AuthFlags f;
  AuthOptions none;
  auto p = SecurityPostureOf(f, none, "tessel-server");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("tessel-server has no credentials"), std::string::npos);
  EXPECT_NE(p.status().message().find("--insecure"), std::string::npos);
  f.insecure = true;
  p = SecurityPostureOf(f, none, "tessel-server");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->insecure);
  EXPECT_FALSE(p->authenticated());
  EXPECT_EQ(p->description, "insecure");
}

TEST(SecurityPostureTest, TokensAuthenticate) {
  AuthFlags f;
  AuthOptions o;
  o.token = kAdmin;
  auto p = SecurityPostureOf(f, o, "tessel-registry");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->insecure);
  EXPECT_TRUE(p->authenticated());
  EXPECT_EQ(p->description, "tokens");
  // --insecure beside credentials changes nothing: the credentials count.
  f.insecure = true;
  p = SecurityPostureOf(f, o, "tessel-registry");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->insecure);
}

TEST(SecurityPostureTest, TlsWithoutTableNeedsTrustAnyCertificate) {
  AuthFlags f;
  f.tls = true;
  AuthOptions none;
  auto p = SecurityPostureOf(f, none, "tessel-registry");
  ASSERT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("--trust_any_certificate"), std::string::npos);
  // --insecure does not open it: TLS is configured, the table is what is missing.
  f.insecure = true;
  EXPECT_FALSE(SecurityPostureOf(f, none, "tessel-registry").ok());
  f.trust_any_certificate = true;
  p = SecurityPostureOf(f, none, "tessel-registry");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->description, "mutual TLS, any certificate");
  AuthOptions roles;
  roles.certificate_roles = true;
  roles.token = kAdmin;
  AuthFlags tls;
  tls.tls = true;
  p = SecurityPostureOf(tls, roles, "tessel-server");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->description, "mutual TLS, tokens, certificate roles");
}

}  // namespace
}  // namespace tessel
