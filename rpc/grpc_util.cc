#include "rpc/grpc_util.h"

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessel {

std::shared_ptr<grpc::Channel> MakeChannel(absl::string_view address,
                                           const ClientCredentials& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!credentials.tls()) {
    return grpc::CreateCustomChannel(std::string(address), grpc::InsecureChannelCredentials(),
                                     args);
  }
  if (!credentials.server_name.empty()) {
    args.SetSslTargetNameOverride(credentials.server_name);
  }
  return grpc::CreateCustomChannel(std::string(address), credentials.credentials, args);
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": ", s.error_message());
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    const std::string hint = TlsErrorHint(s.error_message());
    if (!hint.empty()) absl::StrAppend(&message, " (", hint, ")");
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), message);
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    absl::string_view address, const std::vector<grpc::Service*>& services, std::string* bound,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(std::string(address), credentials, &port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (address in use or not permitted?)"));
  }
  std::vector<std::string> parts = absl::StrSplit(address, absl::MaxSplits(':', 1));
  std::string host = parts[0].empty() || parts[0] == "0.0.0.0" ? "127.0.0.1" : parts[0];
  if (address.rfind("[", 0) == 0) host = std::string(address.substr(0, address.rfind(':')));
  *bound = absl::StrCat(host, ":", port);
  return server;
}

}  // namespace tessel
