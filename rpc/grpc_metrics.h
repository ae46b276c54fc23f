// Control-RPC metrics for every gRPC server Tessel starts (StartGrpcServer
// installs it), named as go-grpc-prometheus names them so existing
// dashboards and alerts apply:
//
//   grpc_server_started_total{grpc_service,grpc_method}
//   grpc_server_handled_total{grpc_service,grpc_method,grpc_code}
//   grpc_server_handling_seconds{grpc_service,grpc_method}   (unary calls)
//
// grpc_service is the short service name ("ShardServer"), grpc_code the
// status's name ("OK", "NOT_FOUND"). Bounded: a server has a fixed set of
// methods.
#ifndef TESSEL_RPC_GRPC_METRICS_H_
#define TESSEL_RPC_GRPC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

namespace tessel {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcMetricsFactory();

}  // namespace tessel

#endif  // TESSEL_RPC_GRPC_METRICS_H_
