// A memory registry served over gRPC on loopback, for tests that need a
// real registry in the test process (and to stop and restart it).
#ifndef TESSEL_SERVER_TEST_REGISTRY_H_
#define TESSEL_SERVER_TEST_REGISTRY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "registry/registry_service.h"
#include "rpc/grpc_util.h"

namespace tessel {

// A memory registry served over gRPC on a loopback port.
class TestRegistry {
 public:
  TestRegistry() = default;
  TestRegistry(const TestRegistry&) = delete;
  TestRegistry& operator=(const TestRegistry&) = delete;
  ~TestRegistry() { Stop(); }

  // A fresh registry (it knows no lease): on a new port the first time, on
  // the same address after Stop (a restarted registry). Not while running.
  absl::Status Start();
  // Stops the registry and its gRPC server, waiting up to `grace` for the
  // RPCs in flight; a no-op when not running.
  void Stop(absl::Duration grace = absl::Milliseconds(500));

  bool running() const { return server_ != nullptr; }
  // Where it listens (set by the first Start).
  const std::string& address() const { return address_; }
  RegistryService& service() { return *service_; }

 private:
  std::unique_ptr<RegistryService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace tessel

#endif  // TESSEL_SERVER_TEST_REGISTRY_H_
