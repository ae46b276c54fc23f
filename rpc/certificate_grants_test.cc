// GrantsFromCertificate (rpc/certificate_grants.h) on scripts/gen_certs.sh's
// certificates.
#include "rpc/certificate_grants.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rpc/auth_testing.h"

namespace tessel {
namespace {

using auth_testing::CertDir;
using auth_testing::ReadAll;

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

// A certificate's identity (what a shard server records as a job's creator)
// is its whole subject: the same for every grant it carries, different for
// another subject.
TEST(CertificateRolesTest, IdentityIsTheSubject) {
  auto grants = [](const std::string& name) {
    return GrantsFromCertificate(ReadAll(absl::StrCat(CertDir(), "/", name, ".crt")));
  };
  const std::string scoped = grants("worker-jobA")[0].identity;
  EXPECT_EQ(scoped.rfind("certificate ", 0), 0u) << scoped;
  EXPECT_NE(scoped.find("CN=worker:jobA"), std::string::npos) << scoped;
  EXPECT_NE(scoped.find("O=tessel:worker"), std::string::npos) << scoped;
  EXPECT_EQ(grants("worker-jobA")[0].identity, scoped);  // stable
  EXPECT_NE(grants("worker")[0].identity, scoped);
  EXPECT_NE(grants("admin")[0].identity, grants("worker")[0].identity);
}

}  // namespace
}  // namespace tessel
