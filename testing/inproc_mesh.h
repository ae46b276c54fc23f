// A hybrid job's worker-to-worker mesh for tests in one process: a PeerGroup
// per rank over the in-process transport (transport/inproc), connected to
// each other.
//
// Example:
//   auto peers = InProcMesh({.dp = 1, .tp = 2, .pp = 2}, absl::Seconds(30));
//   // peers[r] is rank r's group; run each rank's stage on a thread of its own
#ifndef TESSEL_TESTING_INPROC_MESH_H_
#define TESSEL_TESTING_INPROC_MESH_H_

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "worker/hybrid.h"
#include "worker/peer_group.h"

namespace tessel {

// config.world() connected groups, each waiting at most `timeout`; a failed
// connection fails the calling test.
std::vector<std::unique_ptr<PeerGroup>> InProcMesh(const HybridConfig& config,
                                                   absl::Duration timeout);

}  // namespace tessel

#endif  // TESSEL_TESTING_INPROC_MESH_H_
