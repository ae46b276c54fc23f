#include "testing/inproc_cluster.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "registry/registry_service.h"
#include "rpc/grpc_util.h"
#include "server/shard_server.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {
// Every endpoint of a test process is on this host: shared memory only.
constexpr char kUcxTls[] = "posix,sysv,self";
}  // namespace

InProcCluster::InProcCluster(Options options)
    : options_(std::move(options)), fabric_(std::make_shared<InProcFabric>()) {}

InProcCluster::~InProcCluster() { Stop(); }

TransportFactory InProcCluster::transport_factory() const {
  if (options_.transport != Kind::kInProc) {
    const bool zero_copy = options_.transport != Kind::kUcxCopied;
    const std::string tls = options_.transport == Kind::kUcxRma ? "cma,tcp,self" : kUcxTls;
    return [zero_copy, tls]() -> absl::StatusOr<std::unique_ptr<Transport>> {
      // Every payload in payload memory as a descriptor, however small (the
      // tests' buckets are): the zero-copy path is the one under test.
      TESSEL_ASSIGN_OR_RETURN(
          auto t,
          UcxTransport::Create({.tls = tls, .zero_copy = zero_copy, .in_place_min_bytes = 0}));
      return std::unique_ptr<Transport>(std::move(t));
    };
  }
  std::shared_ptr<InProcFabric> fabric = fabric_;
  return [fabric]() -> absl::StatusOr<std::unique_ptr<Transport>> {
    return std::unique_ptr<Transport>(InProcTransport::Create(fabric));
  };
}

absl::Status InProcCluster::Start() {
  registry_ = std::make_unique<RegistryService>(options_.lease_ttl);
  TESSEL_ASSIGN_OR_RETURN(registry_server_,
                          StartGrpcServer("127.0.0.1:0", {registry_.get()}, &registry_address_));
  servers_.resize(static_cast<size_t>(options_.servers));
  for (int s = 0; s < options_.servers; ++s) {
    TESSEL_RETURN_IF_ERROR(StartServer(s));
  }
  return absl::OkStatus();
}

absl::Status InProcCluster::StartServer(int shard) {
  ShardServerOptions o;
  o.registry = registry_address_;
  o.pool = options_.pool;
  o.shard = shard;
  o.lease_ttl = options_.lease_ttl;
  o.checkpoint_dir = options_.checkpoint_dir;
  o.stall_report = absl::ZeroDuration();
  // Two update threads whatever the machine: the tests check the bits of
  // buckets updated concurrently (and TSan watches them).
  o.update_threads = 2;
  // Many in-process servers share a test's two cores: update threads sleep
  // as soon as they are out of work (the spin is a speed knob, not a rule).
  o.update_spin = absl::ZeroDuration();
  // Both ways a bucket is updated, in every test (TSan watching): odd shards
  // update buckets of up to 1 MiB on the transport's thread as the last push
  // lands, even shards hand every bucket to an update thread.
  o.inline_update_max_bytes = shard % 2 == 1 ? int64_t{1} << 20 : 0;
  // And both data paths: odd shards authenticate every frame (the workers
  // fetch their keys and seal and check theirs), even shards do not.
  o.data_auth = options_.data_auth_everywhere || shard % 2 == 1;
  o.data_integrity_payload = options_.data_integrity_payload;
  TESSEL_ASSIGN_OR_RETURN(auto transport, transport_factory()());
  auto started = ShardServer::Start(o, std::move(transport));
  if (!started.ok()) {
    return absl::Status(started.status().code(),
                        absl::StrCat("shard server ", shard, ": ", started.status().message()));
  }
  servers_[static_cast<size_t>(shard)] = std::move(*started);
  return absl::OkStatus();
}

absl::Status InProcCluster::RestartServer(int shard) {
  if (shard < 0 || shard >= static_cast<int>(servers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no shard server ", shard));
  }
  servers_[static_cast<size_t>(shard)]->Shutdown();
  servers_[static_cast<size_t>(shard)].reset();
  return StartServer(shard);
}

void InProcCluster::Stop() {
  for (auto& s : servers_) {
    if (s != nullptr) s->Shutdown();
  }
  servers_.clear();
  if (registry_server_ != nullptr) {
    registry_->Stop();
    registry_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    registry_server_.reset();
  }
  registry_.reset();
}

WorkerOptions InProcCluster::worker_options(const std::string& job, int rank, int world) const {
  WorkerOptions o;
  o.registry = registry_address_;
  o.server_pool = options_.pool;
  o.job = job;
  o.rank = rank;
  o.world_size = world;
  o.transport = transport_factory();
  o.lease_ttl = options_.lease_ttl;
  o.connect_timeout = absl::Seconds(30);
  o.step_timeout = absl::Seconds(30);
  return o;
}

}  // namespace tessel
