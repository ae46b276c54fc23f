#include "worker/internal/make_transport.h"

#include "transport/ucx/ucx_transport.h"

namespace tessel::internal {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const WorkerOptions& options) {
  if (options.transport) return options.transport();
  auto ucx = UcxTransport::Create(options.ucx);
  if (!ucx.ok()) return ucx.status();
  return std::unique_ptr<Transport>(std::move(*ucx));
}

}  // namespace tessel::internal
