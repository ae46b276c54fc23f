// ShardFleet: the control-plane client of a pool's shard servers, shared by
// the worker SDK and tesselctl. It owns one stub per shard and makes every
// call the same way: a deadline on each RPC, the admin token (if any) as a
// bearer header, mutual TLS when configured, and errors that name the call,
// the shard and its address while keeping the gRPC status code.
//
// Shards are addressed by index (the registry rank of a ROLE_SERVER member).
// Connect() (re)points one shard at an address; an unchanged address keeps
// its channel.
//
// Threads: not thread-safe; one thread owns a ShardFleet (the worker's
// driving thread, or the CLI's main).
//
// Example:
//   ShardFleet fleet({.credentials = creds, .token = token});
//   fleet.Connect(0, "127.0.0.1:7001");
//   v1::JobRef ref;
//   ref.set_job("mlp");
//   v1::ShardStats stats;
//   TESSEL_RETURN_IF_ERROR(
//       fleet.Call(0, &v1::ShardServer::Stub::GetStats, ref, &stats, "GetStats"));
//   // Every shard in order, first failure returned:
//   TESSEL_RETURN_IF_ERROR(fleet.ForEach([&](int shard) { return ...; }));
#ifndef TESSEL_RPC_SHARD_FLEET_H_
#define TESSEL_RPC_SHARD_FLEET_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/registry.pb.h"
#include "proto/shard.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "rpc/tls.h"

namespace tessel {

// How every control call of a fleet is made. Every member has a default
// initializer, so a designated initializer may name any subset of them
// (GCC's -Wmissing-field-initializers, an error under -Werror, stays quiet).
struct ControlOptions {
  ClientCredentials credentials = {};  // mutual TLS, or plaintext when empty
  std::string token = {};              // admin bearer token ("" = none)
  absl::Duration timeout = kRpcTimeout;
};

template <typename Request, typename Response>
using ShardRpc = grpc::Status (v1::ShardServer::Stub::*)(grpc::ClientContext*, const Request&,
                                                         Response*);

class ShardFleet {
 public:
  explicit ShardFleet(ControlOptions options = {});

  // Points `shard` at `grpc_address`; a new channel only if the address changed.
  void Connect(int shard, const std::string& grpc_address);
  // Every ROLE_SERVER member of a pool view, by rank. Returns how many.
  int ConnectView(const v1::View& pool);
  bool has(int shard) const { return shards_.count(shard) > 0; }
  // Shard indices known, ascending.
  std::vector<int> shards() const;
  int size() const { return static_cast<int>(shards_.size()); }
  // "" for an unknown shard.
  const std::string& address(int shard) const;

  // A client context with the fleet's token and a deadline `timeout` from
  // now (the fleet's default when zero).
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = absl::ZeroDuration()) const;

  // One RPC to one shard. On failure the status keeps the gRPC code and says
  // "<what> on shard S (address): <message>". An unknown shard is NotFound.
  template <typename Request, typename Response>
  absl::Status Call(int shard, ShardRpc<Request, Response> rpc, const Request& request,
                    Response* response, absl::string_view what,
                    absl::Duration timeout = absl::ZeroDuration()) const {
    if (!has(shard)) return UnknownShard(shard, what);
    return CallWithPrefix(shard, rpc, request, response, OnShard(shard, what), timeout);
  }

  // As Call, but a failure reads "<prefix>: <message>" with `prefix` taken
  // as given: for callers whose messages are fixed (tesselctl's).
  template <typename Request, typename Response>
  absl::Status CallWithPrefix(int shard, ShardRpc<Request, Response> rpc, const Request& request,
                              Response* response, absl::string_view prefix,
                              absl::Duration timeout = absl::ZeroDuration()) const {
    v1::ShardServer::Stub* stub = Stub(shard);
    if (stub == nullptr) return UnknownShard(shard, prefix);
    auto ctx = Context(timeout);
    return FromGrpc((stub->*rpc)(ctx.get(), request, response), prefix);
  }

  // Runs `call` for every known shard in ascending order and returns the
  // first failure (the remaining shards are not called). The shards are
  // those known when ForEach starts, even if `call` connects more.
  absl::Status ForEach(const std::function<absl::Status(int shard)>& call) const;
  // Runs `call` for every shard whatever fails; returns the first failure.
  absl::Status ForAll(const std::function<absl::Status(int shard)>& call) const;

  // The raw stub (nullptr for an unknown shard), for streaming calls. Valid
  // until Connect() re-points that shard or the fleet is destroyed.
  v1::ShardServer::Stub* Stub(int shard) const;
  const ControlOptions& options() const { return options_; }

 private:
  struct Entry {
    std::string address;
    std::unique_ptr<v1::ShardServer::Stub> stub;
  };
  // "<what> on shard S (address)".
  std::string OnShard(int shard, absl::string_view what) const;
  static absl::Status UnknownShard(int shard, absl::string_view what);

  ControlOptions options_;
  std::map<int, Entry> shards_;
};

}  // namespace tessel

#endif  // TESSEL_RPC_SHARD_FLEET_H_
