#include "registry/etcd/etcd_client.h"

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

namespace {

// The host of "host:port" or "[v6]:port".
std::string HostOf(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  std::string host = colon == std::string::npos ? endpoint : endpoint.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

// What to check when the first call to etcd failed, by how it was dialed.
std::string ConnectHint(bool tls) {
  if (!tls) {
    return "check that etcd runs and listens there (etcd --listen-client-urls http://HOST:2379 "
           "--advertise-client-urls http://HOST:2379), or pass the right --etcd_endpoints; if "
           "etcd serves TLS (https:// client URLs), dial it with TLS: --etcd_tls_ca=CA (and "
           "--etcd_tls_cert/--etcd_tls_key when etcd runs with --client-cert-auth)";
  }
  return "check that etcd runs and serves TLS there (etcd --listen-client-urls https://HOST:2379 "
         "--cert-file --key-file), that --etcd_tls_ca is the CA that issued etcd's certificate "
         "and that the certificate names the host dialed, and, if etcd runs with "
         "--client-cert-auth, that --etcd_tls_cert/--etcd_tls_key are a pair issued by the CA in "
         "etcd's --trusted-ca-file (etcd's log says which side refused the handshake); or pass "
         "the right --etcd_endpoints";
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(
    const std::vector<std::string>& endpoints, absl::Duration rpc_timeout,
    const ClientCredentials& credentials) {
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoint given (e.g. --etcd_endpoints=host:2379)");
  }
  std::vector<std::string> stripped;
  std::string http, https;  // the first endpoint written with each scheme
  for (const std::string& e : endpoints) {
    std::string s = e;
    if (absl::StartsWith(e, "https://")) {
      s = e.substr(std::string("https://").size());
      if (https.empty()) https = e;
    } else if (absl::StartsWith(e, "http://")) {
      s = e.substr(std::string("http://").size());
      if (http.empty()) http = e;
    }
    while (absl::EndsWith(s, "/")) s.pop_back();
    if (s.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", e, "' has no host:port (e.g. https://10.0.0.5:2379)"));
    }
    stripped.push_back(s);
  }
  if (!http.empty() && !https.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd endpoints mix plaintext (", http, ") and TLS (", https,
        "); one connection to etcd is either: use TLS (https://) or plaintext for every endpoint"));
  }
  if (!http.empty() && credentials.tls()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd endpoint ", http,
        " is plaintext, but TLS credentials for etcd were given (--etcd_tls_ca, --etcd_tls_cert, "
        "--etcd_tls_key): write https://HOST:PORT (or plain HOST:PORT) to use TLS, or drop "
        "the --etcd_tls_* flags"));
  }
  ClientCredentials creds = credentials;
  if (!https.empty() && !creds.tls()) {
    // https:// without a CA: verify etcd against the system's roots.
    creds.credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
    if (creds.credentials == nullptr) {
      return absl::InternalError("gRPC refused the TLS client credentials for etcd");
    }
  }
  const std::string joined = absl::StrJoin(stripped, ",");
  // gRPC's ipv4: scheme takes several addresses and fails over between them.
  // Its authority is the whole list, which no certificate names: verify every
  // member's certificate against the first endpoint's host instead.
  const std::string target = stripped.size() == 1 ? stripped[0] : absl::StrCat("ipv4:", joined);
  if (creds.tls() && stripped.size() > 1 && creds.server_name.empty()) {
    creds.server_name = HostOf(stripped[0]);
  }
  auto client = std::unique_ptr<EtcdClient>(
      new EtcdClient(creds.tls() ? absl::StrCat(joined, " (TLS)") : joined,
                     MakeChannel(target, creds), rpc_timeout));
  // etcd may still be starting: wait for the channel up to the timeout, then
  // ask it something (a channel that failed to connect fails this at once,
  // with the reason).
  client->channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + rpc_timeout));
  etcdserverpb::RangeRequest probe;
  probe.set_key("/");
  probe.set_count_only(true);
  auto r = client->Range(probe);
  if (!r.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach etcd at ", client->endpoints_, " within ", absl::FormatDuration(rpc_timeout),
        " (", r.status().message(), "); ", ConnectHint(creds.tls())));
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
