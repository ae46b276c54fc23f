#include "rpc/grpc_util.h"

#include <arpa/inet.h>
#include <grpcpp/health_check_service_interface.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "rpc/grpc_metrics.h"
#include "rpc/limits.h"

namespace tessel {

std::shared_ptr<grpc::Channel> MakeChannel(absl::string_view address,
                                           const ClientCredentials& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, kGrpcMaxMessageBytes);
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

namespace {
std::atomic<int64_t> g_client_calls[2];
}  // namespace

void CountClientCall(RpcService service) {
  g_client_calls[static_cast<int>(service)].fetch_add(1, std::memory_order_relaxed);
}

int64_t ClientCalls(RpcService service) {
  return g_client_calls[static_cast<int>(service)].load(std::memory_order_relaxed);
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

namespace {
// "host" of "host:port" or "[v6]:port" (brackets kept).
std::string HostOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return std::string(address);
  return std::string(address.substr(0, colon));
}

bool IsWildcard(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" || host == "*";
}

std::string FirstNonLoopbackIPv4() {
  ifaddrs* addresses = nullptr;
  if (getifaddrs(&addresses) != 0) return "";
  std::string found;
  for (ifaddrs* a = addresses; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(addresses);
  return found;
}
}  // namespace

absl::StatusOr<std::string> AdvertiseHost(absl::string_view listen, absl::string_view advertise) {
  if (!advertise.empty()) return std::string(advertise);
  const std::string host = HostOf(listen);
  if (!IsWildcard(host)) return host;
  const char* pod_ip = std::getenv("POD_IP");
  if (pod_ip != nullptr && *pod_ip != '\0') return std::string(pod_ip);
  std::string found = FirstNonLoopbackIPv4();
  if (!found.empty()) return found;
  return absl::FailedPreconditionError(absl::StrCat(
      "listening on ", listen,
      " (every interface) but this host has no non-loopback IPv4 "
      "address to register; pass --advertise_address=HOST (the address other hosts dial) or "
      "listen on a specific address"));
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(
    absl::string_view address, const std::vector<grpc::Service*>& services, std::string* bound,
    std::shared_ptr<grpc::ServerCredentials> credentials, absl::string_view advertise) {
  TESSEL_ASSIGN_OR_RETURN(auto host, AdvertiseHost(address, advertise));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(std::string(address), credentials, &port);
  builder.SetMaxReceiveMessageSize(kGrpcMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeGrpcMetricsFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (address in use or not permitted?)"));
  }
  *bound = absl::StrCat(host, ":", port);
  return server;
}

}  // namespace tessel
