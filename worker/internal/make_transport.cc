#include "worker/internal/make_transport.h"

#include "core/status_macros.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel::internal {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const WorkerOptions& options) {
  if (options.transport) return options.transport();
  TESSEL_ASSIGN_OR_RETURN(auto ucx, UcxTransport::Create(options.ucx));
  return std::unique_ptr<Transport>(std::move(ucx));
}

}  // namespace tessel::internal
