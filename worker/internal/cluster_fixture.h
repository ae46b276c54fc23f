// Test-only: ClusterTest, a GoogleTest fixture for the control-plane tests
// of worker/internal: a registry and shard servers in the test process
// (testing/inproc_cluster.h), started in SetUp, with the pool's view once
// every server registered and a ShardFleet connected to them.
//
// Contract: SetUp starts the cluster ClusterOptions() describes (two
// servers by default), waits (30 s) until all its servers are in the
// registry and connects fleet_ to each; a failure fails the test there.
// TearDown stops the cluster.
//
// Threads: the test's thread; tests may use fleet_ from their own threads
// (ShardFleet's calls are thread-safe).
//
// Example:
//   class JobControlTest : public ClusterTest {};
//   TEST_F(JobControlTest, Creates) {
//     JobControl control(&ctx, &fleet_);
//     ASSERT_TRUE(control.CreateJob(req, "CreateJob", nullptr).ok());
//   }
#ifndef TESSEL_WORKER_INTERNAL_CLUSTER_FIXTURE_H_
#define TESSEL_WORKER_INTERNAL_CLUSTER_FIXTURE_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "proto/registry.pb.h"
#include "rpc/shard_fleet.h"
#include "testing/inproc_cluster.h"

namespace tessel::internal {

class ClusterTest : public ::testing::Test {
 protected:
  virtual InProcCluster::Options ClusterOptions() { return InProcCluster::Options(); }
  void SetUp() override;
  void TearDown() override;

  // How many workers of `job` the registry holds now.
  int WorkersRegistered(const std::string& job);

  std::unique_ptr<InProcCluster> cluster_;
  v1::View pool_;  // the servers' pool, every one registered
  ShardFleet fleet_;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_CLUSTER_FIXTURE_H_
