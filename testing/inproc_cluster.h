// InProcCluster: a whole Tessel control and data plane inside one test
// process: the registry (memory backend) on a gRPC port of loopback, and
// shard servers (server/shard_server.h) whose data path is the in-process
// transport or UCX. Workers of the worker SDK join it from threads with
// `worker_options(rank, world)`, which carries a TransportFactory of the same
// kind. It is the seeds' InMemoryCommunicationBackend, with real servers.
//
// Example:
//   InProcCluster::Options options;
//   options.transport = InProcCluster::Kind::kInProc;
//   InProcCluster cluster(options);
//   ASSERT_TRUE(cluster.Start().ok());
//   WorkerOptions o = cluster.worker_options("job", /*rank=*/0, /*world=*/2);
//   auto worker = Worker::Connect(o);
//
// Threads: Start/Stop on the test's thread; worker_options from any thread.
#ifndef TESSEL_TESTING_INPROC_CLUSTER_H_
#define TESSEL_TESTING_INPROC_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/lease.h"
#include "worker/options.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tessel {

class InProcFabric;
class RegistryService;
class ShardServer;

class InProcCluster {
 public:
  // kUcxCopied: UCX with zero-copy off (every payload through the queues).
  // kUcxRma: UCX without shared memory (cma,tcp,self): payloads cannot be
  // mapped, so they go by UCX's rendezvous, RMA over cma.
  enum class Kind { kInProc, kUcx, kUcxCopied, kUcxRma };
  struct Options {
    int servers = 2;
    Kind transport = Kind::kInProc;
    std::string pool = "default";
    absl::Duration lease_ttl = kDefaultLeaseTtl;
    std::string checkpoint_dir;  // "" = no checkpoints
    // Which shard servers authenticate data-path frames: the odd ones by
    // default (every test covers both paths), or all.
    bool data_auth_everywhere = false;
    // Where frames are authenticated, the payloads are tagged too
    // (--data_integrity=payload).
    bool data_integrity_payload = false;
  };

  explicit InProcCluster(Options options);
  ~InProcCluster();

  absl::Status Start();
  void Stop();
  // Stops shard server `shard` gracefully (it leaves the registry) and starts
  // a new one for the shard at a new address: a server restart, as after a
  // crash, for recovery tests (give the cluster a checkpoint_dir).
  absl::Status RestartServer(int shard);

  const std::string& registry_address() const { return registry_address_; }
  // Options for a worker of `job` with this cluster's registry and transport.
  WorkerOptions worker_options(const std::string& job, int rank, int world) const;
  TransportFactory transport_factory() const;
  static const char* KindName(Kind kind) {
    switch (kind) {
      case Kind::kInProc:
        return "inproc";
      case Kind::kUcx:
        return "ucx";
      case Kind::kUcxCopied:
        return "ucx_copied";
      case Kind::kUcxRma:
        return "ucx_rma";
    }
    return "?";
  }

 private:
  const Options options_;
  std::shared_ptr<InProcFabric> fabric_;
  std::unique_ptr<RegistryService> registry_;
  std::unique_ptr<grpc::Server> registry_server_;
  std::string registry_address_;
  absl::Status StartServer(int shard);

  std::vector<std::unique_ptr<ShardServer>> servers_;
};

}  // namespace tessel

#endif  // TESSEL_TESTING_INPROC_CLUSTER_H_
