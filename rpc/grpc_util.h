// gRPC plumbing shared by every process: channels and servers are built here
// (keepalive, message size, bounded reconnect backoff, mutual TLS when
// configured: rpc/tls.h), and statuses convert between absl and gRPC without
// losing code or message.
//
// Example:
//   auto channel = MakeChannel("127.0.0.1:7000");  // or MakeChannel(addr, creds) for TLS
//   auto stub = tessel::v1::Registry::NewStub(channel);
//   grpc::ClientContext ctx;
//   SetDeadline(&ctx, absl::Seconds(5));
#ifndef TESSEL_RPC_GRPC_UTIL_H_
#define TESSEL_RPC_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpc/tls.h"

namespace tessel {

// Default deadline of a control RPC.
inline constexpr absl::Duration kRpcTimeout = absl::Seconds(10);

// A channel to `address`, insecure unless `credentials` carry TLS.
std::shared_ptr<grpc::Channel> MakeChannel(absl::string_view address,
                                           const ClientCredentials& credentials = {});

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout = kRpcTimeout);

// Control calls this process started as a client, per service: a steady-state
// training step should make none (benchmarks/datapath_bench reports them).
// ShardFleet and RegistryClient count every call they prepare (a registry
// client's lease heartbeats included: those go by time, not by step).
enum class RpcService { kShard = 0, kRegistry = 1 };
void CountClientCall(RpcService service);
int64_t ClientCalls(RpcService service);

// "<what>: <message>" with the gRPC code; an UNAVAILABLE that looks like a
// TLS problem gets a hint saying which flag to check.
absl::Status FromGrpc(const grpc::Status& s, absl::string_view what);
grpc::Status ToGrpc(const absl::Status& s);

// The host other processes should dial to reach a server listening on
// `listen` ("host:port"): `advertise` when given; else the listen host
// unless it is a wildcard (0.0.0.0, [::], empty); for a wildcard the
// environment's POD_IP (Kubernetes' downward API), else this host's first
// up, non-loopback IPv4 address. Never 127.0.0.1 for a wildcard listen:
// peers on other hosts would dial their own loopback. FailedPrecondition
// when a wildcard listen finds no address (pass --advertise_address).
absl::StatusOr<std::string> AdvertiseHost(absl::string_view listen, absl::string_view advertise);

// Starts a gRPC server on `address` (port 0 picks a free port). On success
// returns the server and writes the "host:port" others dial to *bound (the
// host from AdvertiseHost(address, advertise), the port bound). Plaintext
// unless `credentials` (LoadServerCredentials) say otherwise. Every server
// also serves grpc.health.v1 (gRPC's default health service; rpc/health.h's
// HealthReporter sets what it answers).
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    absl::string_view address, const std::vector<grpc::Service*>& services, std::string* bound,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr,
    absl::string_view advertise = "");

}  // namespace tessel

#endif  // TESSEL_RPC_GRPC_UTIL_H_
