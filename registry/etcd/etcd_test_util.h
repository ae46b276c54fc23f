// EtcdProcess: a real etcd server for tests, on free loopback ports with a
// fresh data directory, killed and removed on destruction. Started with a
// 10 ms heartbeat and 100 ms election timeout so that 1 s leases are allowed
// and lapse promptly. The child gets SIGKILL if the test process dies.
//
// Example:
//   if (!EtcdProcess::Available()) GTEST_SKIP() << EtcdProcess::kMissing;
//   auto etcd = EtcdProcess::Start(::testing::TempDir());
//   ASSERT_TRUE(etcd.ok()) << etcd.status();
//   EtcdRegistry::Connect({.endpoints = {(*etcd)->endpoint()}});
#ifndef TESSEL_REGISTRY_ETCD_ETCD_TEST_UTIL_H_
#define TESSEL_REGISTRY_ETCD_ETCD_TEST_UTIL_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tessel {

class EtcdProcess {
 public:
  static constexpr char kBinary[] = "/usr/bin/etcd";
  static constexpr char kMissing[] =
      "/usr/bin/etcd not found: install Debian's etcd-server (scripts/install_deps.sh does)";
  static bool Available();

  // Starts etcd under `dir` and waits (at most 30 s) until it answers.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(const std::string& dir);
  ~EtcdProcess();

  // host:port of the client URL.
  const std::string& endpoint() const { return endpoint_; }

 private:
  EtcdProcess() = default;
  pid_t pid_ = -1;
  std::string data_dir_;
  std::string endpoint_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_ETCD_ETCD_TEST_UTIL_H_
