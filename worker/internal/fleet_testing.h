// Test-only: a ShardFleet pointed at the shard servers of an in-process
// cluster (testing/inproc_cluster.h) once they all registered, for the
// tests of the control-plane objects (JobControl, ElasticGrowth,
// server_state).
//
// Contract: waits (30 s) until `servers` shard servers of `pool` are in the
// registry, connects `fleet` to each, and returns OK only if all were.
//
// Threads: the test's thread.
//
// Example:
//   ShardFleet fleet;
//   ASSERT_TRUE(ConnectFleet(cluster.registry_address(), "default", 2, &fleet).ok());
#ifndef TESSEL_WORKER_INTERNAL_FLEET_TESTING_H_
#define TESSEL_WORKER_INTERNAL_FLEET_TESTING_H_

#include <string>

#include "absl/status/status.h"
#include "rpc/shard_fleet.h"

namespace tessel::internal {

absl::Status ConnectFleet(const std::string& registry_address, const std::string& pool, int servers,
                          ShardFleet* fleet);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_FLEET_TESTING_H_
