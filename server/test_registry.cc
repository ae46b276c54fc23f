#include "server/test_registry.h"

#include <utility>

#include "absl/time/clock.h"

namespace tessel {

absl::Status TestRegistry::Start() {
  if (running()) return absl::FailedPreconditionError("the test registry is running");
  auto service = std::make_unique<RegistryService>(absl::Seconds(3));
  const std::string listen = address_.empty() ? "127.0.0.1:0" : address_;
  std::string bound;
  auto server = StartGrpcServer(listen, {service.get()}, &bound);
  if (!server.ok()) return server.status();
  service_ = std::move(service);
  server_ = std::move(*server);
  if (address_.empty()) address_ = bound;
  return absl::OkStatus();
}

void TestRegistry::Stop(absl::Duration grace) {
  if (!running()) return;
  service_->Stop();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_.reset();
}

}  // namespace tessel
