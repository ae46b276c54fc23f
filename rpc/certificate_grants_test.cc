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

}  // namespace
}  // namespace tessel
