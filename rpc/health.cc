#include "rpc/health.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/health.grpc.pb.h"
#include "rpc/grpc_util.h"
#include "runtime/log.h"

namespace tessel {

// The health-only listener's service (gRPC's default health service needs
// another sync service beside it; this one answers from the reporter).
class HealthReporter::Service final : public grpc::health::v1::Health::Service {
 public:
  explicit Service(const HealthReporter* reporter) : reporter_(reporter) {}
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override {
    absl::StatusOr<bool> serving = reporter_->Serving(request->service());
    if (!serving.ok()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
    response->set_status(*serving ? grpc::health::v1::HealthCheckResponse::SERVING
                                  : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    return grpc::Status::OK;
  }

 private:
  const HealthReporter* reporter_;
};

HealthReporter::HealthReporter(std::vector<std::string> services)
    : services_(std::move(services)) {}

HealthReporter::~HealthReporter() { Shutdown(); }

absl::Status HealthReporter::Listen(absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  service_ = std::make_unique<Service>(this);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(std::string(address), grpc::InsecureServerCredentials(), &port);
  // Only this service: no default health service beside it.
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.RegisterService(service_.get());
  listener_ = builder.BuildAndStart();
  if (listener_ == nullptr || port == 0) {
    listener_.reset();
    return absl::UnavailableError(absl::StrCat("health listener: cannot listen on ", address,
                                               " (address in use or not permitted?)"));
  }
  auto host = AdvertiseHost(address, "");
  health_address_ = absl::StrCat(host.ok() ? *host : "127.0.0.1", ":", port);
  return absl::OkStatus();
}

void HealthReporter::Apply(grpc::Server* server, bool ready) const {
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", ready);
  for (const std::string& name : services_) health->SetServingStatus(name, ready);
  health->SetServingStatus("liveness", true);
}

void HealthReporter::Attach(grpc::Server* server) {
  absl::MutexLock lock(&mu_);
  servers_.push_back(server);
  Apply(server, ready_);
}

void HealthReporter::Detach(grpc::Server* server) {
  absl::MutexLock lock(&mu_);
  servers_.erase(std::remove(servers_.begin(), servers_.end(), server), servers_.end());
}

void HealthReporter::SetReady(bool ready, absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (ready == ready_) return;
  TESSEL_LOG(INFO) << "readiness: " << (ready ? "SERVING" : "NOT_SERVING") << " (" << reason << ")";
  ready_ = ready;
  reason_ = std::string(reason);
  for (grpc::Server* server : servers_) Apply(server, ready);
}

bool HealthReporter::ready() const {
  absl::MutexLock lock(&mu_);
  return ready_;
}

absl::StatusOr<bool> HealthReporter::Serving(absl::string_view service) const {
  if (service == "liveness") return true;
  if (!service.empty() &&
      std::find(services_.begin(), services_.end(), service) == services_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown service ", service));
  }
  return ready();
}

void HealthReporter::Shutdown() {
  if (listener_ == nullptr) return;
  listener_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
  listener_.reset();
}

}  // namespace tessel
