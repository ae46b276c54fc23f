// tessel-health-probe: one grpc.health.v1 Check, as Kubernetes' gRPC probes
// make it, for tests, operators and scripts (the image has no
// grpc_health_probe). Prints the answer and exits 0 when SERVING.
//
//   tessel-health-probe --address=10.0.0.5:7101                     # readiness
//   tessel-health-probe --address=10.0.0.5:7101 --service=liveness
//
// Exit status: 0 SERVING; 1 NOT_SERVING, UNKNOWN or an unknown service;
// 2 no answer (unreachable, deadline exceeded) or bad usage.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/health.grpc.pb.h"
#include "runtime/cli.h"

ABSL_FLAG(std::string, address, "", "host:port of a plaintext grpc.health.v1 service (required)");
ABSL_FLAG(std::string, service, "",
          "service to ask about: \"\" = readiness (the default), \"liveness\", or a gRPC "
          "service name");
ABSL_FLAG(int, timeout_ms, 1000, "deadline of the connection and the call, in milliseconds");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Asks a grpc.health.v1 service (e.g. a Tessel --health_listen port) for the status of one "
      "service, as a Kubernetes gRPC probe does.\n\n"
      "Usage: tessel-health-probe --address=HOST:PORT [--service=\"\"|liveness] "
      "[--timeout_ms=1000]\n"
      "Prints SERVING, NOT_SERVING, UNKNOWN, SERVICE_UNKNOWN or UNREACHABLE: <reason>; "
      "exits 0 only for SERVING (1: not serving, 2: no answer or bad usage).");
  tessel::ParseFlags(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (address.empty() || timeout_ms <= 0) {
    std::fprintf(stderr,
                 "tessel-health-probe: --address=HOST:PORT is required and --timeout_ms must be "
                 "> 0 (see --help)\n");
    return 2;
  }
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(timeout_ms)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    std::printf("SERVICE_UNKNOWN\n");  // the server does not know this service name
    return 1;
  }
  if (!status.ok()) {
    std::printf("UNREACHABLE: %s (%s, after at most %d ms)\n", status.error_message().c_str(),
                address.c_str(), timeout_ms);
    return 2;
  }
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  std::printf("%s\n", name.c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}
