// HealthChecker: active health checks of registry members, so that a member
// whose process hangs (its heartbeat thread still renewing the lease, its
// service dead) is removed all the same. Modelled on Ray's
// gcs_health_check_manager.
//
// Every `period`, each live member with a non-empty grpc_address is asked
// grpc.health.v1.Health/Check (service "", the server's overall health) with
// deadline `timeout`, all members concurrently. An answer other than SERVING
// (NOT_SERVING, an RPC error, a timeout) is a failure; SERVING resets the
// count. After `failure_threshold` consecutive failures the member is evicted
// through Registry::Leave (its lease ends, the group's epoch is bumped,
// watchers see the new view) and a warning names the member, its address and
// the last error. Failure counts belong to a lease: a member that joins again
// starts from zero.
//
// Threads: Start() runs rounds on a thread this object owns; RunOnce() runs
// one round on the caller's thread (tests drive rounds by hand). Rounds never
// overlap.
//
// Example:
//   HealthChecker checker(registry.get(), {.period = absl::Seconds(1)});
//   checker.Start();
#ifndef TESSEL_REGISTRY_HEALTH_CHECKER_H_
#define TESSEL_REGISTRY_HEALTH_CHECKER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/health.grpc.pb.h"
#include "registry/registry.h"
#include "rpc/tls.h"

namespace tessel {

struct HealthCheckOptions {
  absl::Duration period = absl::Seconds(2);  // zero: no background checks
  absl::Duration timeout = absl::Seconds(1);
  int failure_threshold = 3;
  // Channels to the members (mutual TLS when the cluster uses it).
  ClientCredentials credentials;
};

class HealthChecker {
 public:
  // `registry` must outlive this object.
  HealthChecker(Registry* registry, HealthCheckOptions options);
  ~HealthChecker();

  // Runs a round every period until Stop() (no-op if the period is zero).
  void Start();
  void Stop();

  // One round; returns the members it evicted.
  std::vector<Registry::Leased> RunOnce();

 private:
  struct Target {
    int failures = 0;
    std::string last_error;
  };

  grpc::health::v1::Health::Stub* StubFor(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);

  Registry* const registry_;
  const HealthCheckOptions options_;

  // Held for a whole round: rounds never overlap.
  absl::Mutex round_mu_;
  absl::flat_hash_map<int64_t, Target> targets_ ABSL_GUARDED_BY(round_mu_);  // by lease
  absl::flat_hash_map<std::string, std::unique_ptr<grpc::health::v1::Health::Stub>> stubs_
      ABSL_GUARDED_BY(round_mu_);  // by address

  absl::Mutex stop_mu_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_HEALTH_CHECKER_H_
