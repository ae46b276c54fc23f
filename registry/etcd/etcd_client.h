// EtcdClient: the few etcd v3 calls the etcd registry backend makes, over
// etcd's gRPC API (proto/etcd/rpc.proto), with a deadline on every unary call
// and etcd's errors turned into absl::Status naming the endpoint and what to
// do. No retries here; callers decide.
//
// Thread-safe (gRPC stubs are).
//
// Example:
//   auto etcd = EtcdClient::Connect({"127.0.0.1:2379"}, absl::Seconds(5));
//   // or over TLS: EtcdClient::Connect({"https://10.0.0.5:2379"}, timeout,
//   //                                  *LoadTlsClientCredentials(files, names));
//   etcdserverpb::RangeRequest req;
//   req.set_key("/tessel/");
//   req.set_range_end(EtcdClient::PrefixEnd("/tessel/"));
//   auto resp = (*etcd)->Range(req);
#ifndef TESSEL_REGISTRY_ETCD_ETCD_CLIENT_H_
#define TESSEL_REGISTRY_ETCD_ETCD_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/etcd/rpc.grpc.pb.h"
#include "rpc/tls.h"

namespace tessel {

class EtcdClient {
 public:
  // Builds the channel and checks that etcd answers within `rpc_timeout`.
  // `endpoints` are host:port of etcd's client URLs, optionally with a
  // scheme; several are tried in turn by gRPC (they must then be IP
  // literals). TLS when `credentials` carry it (LoadTlsClientCredentials:
  // a CA, and a client certificate for etcd's --client-cert-auth) or an
  // endpoint is https:// (without credentials: verified against the
  // system's roots); "http://" is plaintext and refuses TLS credentials;
  // schemes must not be mixed (InvalidArgument). With several endpoints over
  // TLS every member's certificate must name the first endpoint's host
  // (unless credentials.server_name says otherwise). Unavailable, with what
  // to do, if none answers (also for a refused TLS handshake).
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(
      const std::vector<std::string>& endpoints, absl::Duration rpc_timeout,
      const ClientCredentials& credentials = {});

  // The smallest key greater than every key starting with `prefix`.
  static std::string PrefixEnd(const std::string& prefix);

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& req);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& req);
  // Grants a lease of at least `ttl` (rounded up to whole seconds; etcd may
  // raise it to its minimum).
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(absl::Duration ttl);
  // NotFound if the lease is unknown or has expired.
  absl::Status LeaseRevoke(int64_t lease_id);
  // One keepalive on a short-lived stream; returns the lease's ttl in
  // seconds, NotFound if the lease is unknown or has expired.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease_id);
  // NotFound if the lease is unknown or has expired.
  absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> LeaseTimeToLive(int64_t lease_id,
                                                                        bool keys);

  // Opens a Watch stream (the caller writes the create request, reads, and
  // cancels through `ctx`).
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
  OpenWatch(grpc::ClientContext* ctx);

  const std::string& endpoints() const { return endpoints_; }

 private:
  EtcdClient(std::string endpoints, std::shared_ptr<grpc::Channel> channel,
             absl::Duration rpc_timeout);
  absl::Status Error(const grpc::Status& s, const char* what) const;

  const std::string endpoints_;  // for messages ("host:port,... (TLS)")
  const absl::Duration rpc_timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;
};

}  // namespace tessel

#endif  // TESSEL_REGISTRY_ETCD_ETCD_CLIENT_H_
