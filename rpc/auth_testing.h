// Shared by the rpc auth tests (testonly): the tokens they configure, a
// scratch file writer, and certificates from scripts/gen_certs.sh (with a
// worker scoped to job "jobA").
//
// Example:
//   const std::string path = WriteFile("admin", absl::StrCat(kAdmin, "\n"));
//   std::string pem = ReadAll(absl::StrCat(CertDir(), "/worker-jobA.crt"));
#ifndef TESSEL_RPC_AUTH_TESTING_H_
#define TESSEL_RPC_AUTH_TESTING_H_

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "rpc/auth_options.h"

namespace tessel::auth_testing {

inline constexpr char kAdmin[] = "tessel-admin-token-0123";
inline constexpr char kWorker[] = "tessel-worker-token-0123";
inline constexpr char kWorkerA[] = "tessel-worker-token-jobA";
inline constexpr char kServer[] = "tessel-server-token-0123";

// An admin token, an unscoped worker token and one scoped to "jobA";
// anonymous reads allowed.
inline AuthOptions Tokens() {
  AuthOptions o;
  o.token = kAdmin;
  o.allow_anonymous_reads = true;
  o.worker_tokens = {{kWorker, Role::kWorker, {}}, {kWorkerA, Role::kWorker, {"jobA"}}};
  return o;
}

inline std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// Writes `text` to TmpDir()/name, owner-only (0600, as every token file
// must be: rpc/secret_file.h), and returns the path.
inline std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = absl::StrCat(TmpDir(), "/", name);
  std::ofstream(path) << text;
  EXPECT_EQ(chmod(path.c_str(), 0600), 0) << path;
  return path;
}

// The directory of the certificates (made once per test process).
inline std::string CertDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(absl::StrCat(TmpDir(), "/auth_test_certs"));
    const std::string cmd = absl::StrCat("scripts/gen_certs.sh ", *d, " jobA > /dev/null");
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return *dir;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace tessel::auth_testing

#endif  // TESSEL_RPC_AUTH_TESTING_H_
