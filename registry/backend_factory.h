// RegistryBackends: the one place where tests and benchmarks build a Registry
// of each backend, by name ("memory", "etcd"), so that every suite run over
// the backends (the conformance suite, the health checker's) makes them the
// same way. The etcd backend runs over a real etcd on loopback (EtcdProcess),
// started on the first Make("etcd") under `dir`, shared by every registry this
// object makes, and killed with this object: destroy the registries first.
//
// Threads: one thread at a time (the test's); the registries it returns are
// thread-safe as always.
//
// Example:
//   class MyTest : public ::testing::TestWithParam<std::string> {
//    protected:
//     void SetUp() override {
//       absl::Status available = RegistryBackends::Available(GetParam());
//       if (!available.ok()) GTEST_SKIP() << available.message();
//       auto made = backends_.Make(GetParam(), {.default_ttl = absl::Seconds(1)});
//       ASSERT_TRUE(made.ok()) << made.status();
//       registry_ = std::move(*made);
//     }
//     RegistryBackends backends_{::testing::TempDir()};
//     std::unique_ptr<Registry> registry_;  // declared after: destroyed first
//   };
//   INSTANTIATE_TEST_SUITE_P(Backends, MyTest, ::testing::ValuesIn(RegistryBackends::Names()),
//                            [](const auto& info) { return info.param; });
#ifndef TESSEL_REGISTRY_BACKEND_FACTORY_H_
#define TESSEL_REGISTRY_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/lease.h"
#include "registry/etcd/etcd_test_util.h"
#include "registry/registry.h"

namespace tessel {

struct RegistryBackendOptions {
  // The ttl of a Join that asks for none (absl::ZeroDuration()).
  absl::Duration default_ttl = kDefaultLeaseTtl;
  // etcd: where the registry's keys live. Registries made with the same
  // prefix share their state (a registry restart); tests that share one etcd
  // each use a prefix of their own.
  std::string etcd_prefix = "/tessel";
};

class RegistryBackends {
 public:
  // Every backend, in the order suites run them: {"memory", "etcd"}.
  static std::vector<std::string> Names();

  // OK if `backend` can run on this host; FailedPrecondition saying what to
  // install if not (etcd needs /usr/bin/etcd), InvalidArgument if no backend
  // has that name.
  static absl::Status Available(absl::string_view backend);

  // `dir`: where the etcd's data directory goes (a test's TempDir).
  explicit RegistryBackends(std::string dir);
  RegistryBackends(const RegistryBackends&) = delete;
  RegistryBackends& operator=(const RegistryBackends&) = delete;

  // A new registry of `backend`. For etcd, starts the shared etcd if it does
  // not run yet; its errors (etcd not starting or not answering) come back.
  absl::StatusOr<std::unique_ptr<Registry>> Make(absl::string_view backend,
                                                 const RegistryBackendOptions& options = {});

 private:
  std::string dir_;
  std::unique_ptr<EtcdProcess> etcd_;  // started by the first Make("etcd")
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_BACKEND_FACTORY_H_
