#include "testing/inproc_mesh.h"

#include <string>

#include "gtest/gtest.h"
#include "transport/inproc/inproc_transport.h"

namespace tessel {

std::vector<std::unique_ptr<PeerGroup>> InProcMesh(const HybridConfig& config,
                                                   absl::Duration timeout) {
  auto fabric = std::make_shared<InProcFabric>();
  std::vector<std::unique_ptr<PeerGroup>> peers;
  std::vector<std::string> addresses;
  for (int r = 0; r < config.world(); ++r) {
    PeerGroupOptions o;
    o.name = "inproc.mesh";
    o.timeout = timeout;
    o.describe = [config](int rank) { return DescribeRank(config, rank); };
    peers.push_back(
        std::make_unique<PeerGroup>(InProcTransport::Create(fabric), r, config.world(), o));
    addresses.push_back(peers.back()->address());
  }
  for (auto& p : peers) EXPECT_TRUE(p->Connect(addresses).ok());
  return peers;
}

}  // namespace tessel
