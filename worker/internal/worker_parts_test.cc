// WorkerParts against a real registry and real shard servers in the test
// process (testing/inproc_cluster.h): Build makes every part from the
// options and contacts nothing, a failure names the worker, the parts are
// wired to one another (the membership the Worker joins next finds the
// servers through the same channel the exchange sends on), and the
// destructor leaves the registry.
#include "worker/internal/worker_parts.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/internal/cluster_fixture.h"

namespace tessel::internal {
namespace {

using ::testing::StartsWith;

class WorkerPartsTest : public ClusterTest {};

TEST_F(WorkerPartsTest, BuildMakesEveryPartAndTheWorkerJoinsThroughThem) {
  WorkerOptions o = cluster_->worker_options("parts", 0, 1);
  o.metrics_address = "127.0.0.1:0";
  o.timeline = absl::StrCat(::testing::TempDir(), "/parts-timeline");
  auto parts = std::make_unique<WorkerParts>(o);
  ASSERT_TRUE(parts->Build().ok());
  ASSERT_NE(parts->channel, nullptr);
  EXPECT_EQ(parts->channel->transport().name(), "inproc");
  ASSERT_NE(parts->membership, nullptr);
  EXPECT_NE(parts->control, nullptr);
  EXPECT_NE(parts->exchange, nullptr);
  EXPECT_NE(parts->units, nullptr);
  EXPECT_NE(parts->collectives, nullptr);
  EXPECT_NE(parts->recovery, nullptr);
  EXPECT_NE(parts->queries, nullptr);
  ASSERT_NE(parts->http, nullptr);
  EXPECT_FALSE(parts->http->address().empty());
  EXPECT_NE(parts->ctx.timeline, nullptr);
  EXPECT_EQ(parts->ctx.timeline, parts->timeline.get());
  EXPECT_EQ(WorkersRegistered("parts"), 0);  // nothing contacted yet

  ASSERT_TRUE(parts->membership->Join().ok());
  EXPECT_EQ(WorkersRegistered("parts"), 1);
  EXPECT_EQ(parts->channel->num_shards(), 2);
  EXPECT_EQ(parts->membership->fleet().size(), 2);
  parts.reset();  // leaves the registry, then stops the transport
  EXPECT_EQ(WorkersRegistered("parts"), 0);
}

TEST_F(WorkerPartsTest, AFailureNamesTheWorker) {
  WorkerOptions o = cluster_->worker_options("broken", 0, 1);
  o.tls.ca_file = "/nonexistent/ca.pem";
  WorkerParts bad_tls(o);
  absl::Status s = bad_tls.Build();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), StartsWith("job 'broken' rank 0 step 0: "));

  o = cluster_->worker_options("broken", 0, 1);
  o.transport = []() -> absl::StatusOr<std::unique_ptr<Transport>> {
    return absl::UnavailableError("no endpoint");
  };
  WorkerParts no_transport(o);
  s = no_transport.Build();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "job 'broken' rank 0 step 0: no endpoint");
}

}  // namespace
}  // namespace tessel::internal
