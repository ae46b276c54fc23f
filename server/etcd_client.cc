#include "server/etcd_client.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rpc/grpc_util.h"

namespace tessel {

EtcdClient::EtcdClient(std::string endpoints, std::shared_ptr<grpc::Channel> channel,
                       absl::Duration rpc_timeout)
    : endpoints_(std::move(endpoints)),
      rpc_timeout_(rpc_timeout),
      channel_(std::move(channel)),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)),
      watch_(etcdserverpb::Watch::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(
    const std::vector<std::string>& endpoints, absl::Duration rpc_timeout) {
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoint given (e.g. --etcd_endpoints=host:2379)");
  }
  std::vector<std::string> stripped;
  for (const std::string& e : endpoints) {
    std::string s = e;
    for (const char* scheme : {"http://", "https://"}) {
      if (absl::StartsWith(s, scheme)) s = s.substr(std::string(scheme).size());
    }
    if (absl::StartsWith(e, "https://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint ", e, ": TLS to etcd is not supported; use http://"));
    }
    stripped.push_back(s);
  }
  const std::string joined = absl::StrJoin(stripped, ",");
  // gRPC's ipv4: scheme takes several addresses and fails over between them.
  const std::string target = stripped.size() == 1 ? stripped[0] : absl::StrCat("ipv4:", joined);
  auto client =
      std::unique_ptr<EtcdClient>(new EtcdClient(joined, MakeChannel(target), rpc_timeout));
  // etcd may still be starting: wait for the channel up to the timeout, then
  // ask it something.
  client->channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + rpc_timeout));
  etcdserverpb::RangeRequest probe;
  probe.set_key("/");
  probe.set_count_only(true);
  auto r = client->Range(probe);
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach etcd at ", joined, " within ", absl::FormatDuration(rpc_timeout), " (",
        r.status().message(),
        "); check that etcd runs and listens there (etcd --listen-client-urls http://HOST:2379 "
        "--advertise-client-urls http://HOST:2379), or pass the right --etcd_endpoints"));
  }
  return client;
}

std::string EtcdClient::PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::Status EtcdClient::Error(const grpc::Status& s, const char* what) const {
  return absl::Status(
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
          ? absl::StatusCode::kUnavailable
          : static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat("etcd ", what, " at ", endpoints_, " failed: ", s.error_message(),
                   s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                       ? " (is etcd running and reachable there?)"
                       : ""));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& req) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  etcdserverpb::RangeResponse resp;
  grpc::Status s = kv_->Range(&ctx, req, &resp);
  if (!s.ok()) return Error(s, "Range");
  return resp;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& req) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  etcdserverpb::TxnResponse resp;
  grpc::Status s = kv_->Txn(&ctx, req, &resp);
  if (!s.ok()) return Error(s, "Txn");
  return resp;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(absl::Duration ttl) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  etcdserverpb::LeaseGrantResponse resp;
  grpc::Status s = lease_->LeaseGrant(&ctx, req, &resp);
  if (!s.ok()) return Error(s, "LeaseGrant");
  if (!resp.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd LeaseGrant at ", endpoints_, " failed: ", resp.error()));
  }
  return resp;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse resp;
  grpc::Status s = lease_->LeaseRevoke(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " is unknown or has lapsed"));
  }
  if (!s.ok()) return Error(s, "LeaseRevoke");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAliveOnce(int64_t lease_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  auto stream = lease_->LeaseKeepAlive(&ctx);
  etcdserverpb::LeaseKeepAliveRequest req;
  req.set_id(lease_id);
  etcdserverpb::LeaseKeepAliveResponse resp;
  const bool ok = stream->Write(req) && stream->Read(&resp);
  stream->WritesDone();
  if (!ok) {
    ctx.TryCancel();
    grpc::Status s = stream->Finish();
    if (s.ok()) s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream ended");
    return Error(s, "LeaseKeepAlive");
  }
  // The server ends its side once ours is done; drain it.
  etcdserverpb::LeaseKeepAliveResponse extra;
  while (stream->Read(&extra)) {
  }
  stream->Finish();
  if (resp.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat("lease ", lease_id, " is unknown or has lapsed; join again"));
  }
  return resp.ttl();
}

absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> EtcdClient::LeaseTimeToLive(int64_t lease_id,
                                                                                  bool keys) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, rpc_timeout_);
  etcdserverpb::LeaseTimeToLiveRequest req;
  req.set_id(lease_id);
  req.set_keys(keys);
  etcdserverpb::LeaseTimeToLiveResponse resp;
  grpc::Status s = lease_->LeaseTimeToLive(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND || (s.ok() && resp.ttl() < 0)) {
    return absl::NotFoundError(absl::StrCat("lease ", lease_id, " is unknown or has lapsed"));
  }
  if (!s.ok()) return Error(s, "LeaseTimeToLive");
  return resp;
}

std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
EtcdClient::OpenWatch(grpc::ClientContext* ctx) {
  return watch_->Watch(ctx);
}

}  // namespace tessel
