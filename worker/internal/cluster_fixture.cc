#include "worker/internal/cluster_fixture.h"

#include "rpc/registry_client.h"

namespace tessel::internal {

void ClusterTest::SetUp() {
  const InProcCluster::Options options = ClusterOptions();
  cluster_ = std::make_unique<InProcCluster>(options);
  absl::Status started = cluster_->Start();
  ASSERT_TRUE(started.ok()) << started;
  RegistryClient registry(cluster_->registry_address());
  auto pool = registry.WaitForView(
      options.pool,
      [&options](const v1::View& v) {
        int servers = 0;
        for (const auto& m : v.members()) servers += m.role() == v1::ROLE_SERVER;
        return servers == options.servers;
      },
      absl::Seconds(30));
  ASSERT_TRUE(pool.ok()) << pool.status();
  pool_ = *pool;
  ASSERT_EQ(fleet_.ConnectView(pool_), options.servers);
}

void ClusterTest::TearDown() {
  if (cluster_ != nullptr) cluster_->Stop();
}

int ClusterTest::WorkersRegistered(const std::string& job) {
  RegistryClient registry(cluster_->registry_address());
  auto view = registry.GetView(job);
  if (!view.ok()) return 0;
  int n = 0;
  for (const auto& m : view->members()) n += m.role() == v1::ROLE_WORKER;
  return n;
}

}  // namespace tessel::internal
