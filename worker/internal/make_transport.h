// The data-path endpoint a worker (or a hybrid mesh) uses: the factory in
// WorkerOptions::transport when one is set, UCX with WorkerOptions::ucx
// otherwise.
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
