// The data-path endpoint a worker (or a hybrid mesh) uses: the factory in
// WorkerOptions::transport when one is set (its error passed on as it is),
// UCX with WorkerOptions::ucx otherwise.
//
// Threads: any; the transport it makes has its own rules
// (transport/transport.h).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, MakeTransport(options));
//   auto channel = std::make_unique<DataChannel>(&ctx, std::move(transport));
#ifndef TESSEL_WORKER_INTERNAL_MAKE_TRANSPORT_H_
#define TESSEL_WORKER_INTERNAL_MAKE_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.h"
#include "worker/options.h"

namespace tessel::internal {

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(const WorkerOptions& options);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_MAKE_TRANSPORT_H_
