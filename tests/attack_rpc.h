// The shard-server RPCs //tests:attacker makes as an insider (a member of
// the attacked job) or as another tenant, and where it finds its targets.
//
// Example:
//   ASSIGN_OR_RETURN(AttackTargets t, ReadTargets("/tmp/targets"));
//   AttackRpc rpc(t.servers[0].grpc, token, tls);
//   grpc::Status s = rpc.GetFrameKey("mlp", 2, epoch, claim, &resp);
#ifndef TESSEL_TESTS_ATTACK_RPC_H_
#define TESSEL_TESTS_ATTACK_RPC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/tls_options.h"

namespace tessel {

// What the registry lists to anyone (tesselctl members): the test writes it
// to a file once the job trains, as lines
//   server SHARD GRPC_ADDRESS HEX_UCX_ADDRESS
//   worker RANK HEX_UCX_ADDRESS
struct AttackTargets {
  struct Server {
    int shard = 0;
    std::string grpc;
    std::string ucx;  // raw bytes
  };
  struct Peer {
    int rank = 0;
    std::string ucx;  // raw bytes
  };
  std::vector<Server> servers;
  std::vector<Peer> workers;
};
absl::StatusOr<AttackTargets> ReadTargets(const std::string& path);
// Waits up to `timeout` for `path` to exist, then reads it.
absl::StatusOr<AttackTargets> WaitForTargets(const std::string& path, absl::Duration timeout);

// One shard server's RPCs under one credential (`token`: "" for none).
class AttackRpc {
 public:
  AttackRpc(const std::string& address, std::string token, const TlsOptions& tls);
  grpc::Status GetFrameKey(const std::string& job, int32_t rank, int64_t epoch,
                           const std::string& claim, v1::FrameKeyResponse* resp);
  grpc::Status GetMeshKey(const std::string& mesh);
  // A one-tensor zero2 job (`floats` fp32 parameters, world `world`, over
  // `shards` shards, this server owning `shard`) at `epoch`; `replace`: a
  // recovery's CreateJob.
  grpc::Status CreateJob(const std::string& job, int32_t shard, int32_t shards, int32_t world,
                         int64_t epoch, bool replace = false, int64_t floats = 64);
  grpc::Status SetEpoch(const std::string& job, int64_t epoch);
  grpc::Status ReadState(const std::string& job);
  grpc::Status WriteState(const std::string& job);
  grpc::Status DeleteJob(const std::string& job);
  grpc::Status GetStats(const std::string& job, v1::ShardStats* stats);

 private:
  void Prepare(grpc::ClientContext* ctx) const;
  std::unique_ptr<v1::ShardServer::Stub> stub_;
  const std::string token_;
};

// Whether a status is a credential refusal (UNAUTHENTICATED or
// PERMISSION_DENIED).
bool IsRefusal(const grpc::Status& s);

// The refusals of RPCs tried: "RPCs R/T".
struct RpcTally {
  int refused = 0;
  int tried = 0;
  // Counts `s`, refused if `want_refused(s)`; logs the unexpected ones.
  void Add(const std::string& what, const grpc::Status& s, bool refused);
};

}  // namespace tessel

#endif  // TESSEL_TESTS_ATTACK_RPC_H_
