#include "rpc/grpc_metrics.h"

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/metrics.h"

namespace tessel {
namespace {

using grpc::experimental::InterceptionHookPoints;

struct Families {
  metrics::Family& started = metrics::Default().AddCounter("grpc_server_started_total",
                                                           "control RPCs started on this server",
                                                           {"grpc_service", "grpc_method"});
  metrics::Family& handled = metrics::Default().AddCounter(
      "grpc_server_handled_total", "control RPCs completed, by status code",
      {"grpc_service", "grpc_method", "grpc_code"});
  metrics::Family& seconds = metrics::Default().AddHistogram(
      "grpc_server_handling_seconds", "time from a unary control RPC's arrival to its status",
      {"grpc_service", "grpc_method"}, metrics::ExponentialBuckets(50e-6, 2, 18));
};

Families& Get() {
  static Families* f = new Families();
  return *f;
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(grpc::experimental::ServerRpcInfo* info)
      : start_(std::chrono::steady_clock::now()),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY) {
    // "/tessel.v1.ShardServer/GetStats" -> ("ShardServer", "GetStats").
    absl::string_view full = info->method() != nullptr ? info->method() : "";
    const size_t slash = full.rfind('/');
    absl::string_view service = slash == absl::string_view::npos ? "" : full.substr(0, slash);
    method_ = std::string(slash == absl::string_view::npos ? full : full.substr(slash + 1));
    const size_t dot = service.rfind('.');
    service_ = std::string(dot == absl::string_view::npos ? service.substr(service.empty() ? 0 : 1)
                                                          : service.substr(dot + 1));
    Get().started.GetCounter({service_, method_})->Add();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const std::string code(
          absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
      Get().handled.GetCounter({service_, method_, code})->Add();
      if (unary_) {
        Get().seconds.GetHistogram({service_, method_})->Observe(metrics::SecondsSince(start_));
      }
    }
    methods->Proceed();
  }

 private:
  const std::chrono::steady_clock::time_point start_;
  const bool unary_;
  std::string service_;
  std::string method_;
};

class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(info);
  }
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsFactory() {
  return std::make_unique<Factory>();
}

}  // namespace tessel
