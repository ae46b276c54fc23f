// UcxContext: the process's UCP context for one UCX transport (ucp_init with
// active messages, wake-up and RMA, workers shared between threads), made
// from UcxOptions: UCX_TLS for this context, and the tcp port range, which
// UCX reads from the environment (process-wide). Shared by the transport and
// its payload memory (payload_memory.h); ucp_cleanup runs with the last
// owner, after every region is unmapped.
//
// Threads: immutable once made; get() from any thread (UCP allows context
// calls from several threads with mt_workers_shared).
//
// Example:
//   TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<UcxContext> context, UcxContext::Create(options));
//   ucp_worker_create(context->get(), &params, &worker);
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_CONTEXT_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_CONTEXT_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/ucx/ucx_options.h"

namespace tessel {
namespace ucx_internal {

// UCX's error `s` from `what`, as Unavailable.
absl::Status UcsError(const char* what, ucs_status_t s);

class UcxContext {
 public:
  // InvalidArgument if UCX rejects options.tls or options.tcp_port_range is
  // malformed (ValidateUcxOptions); Unavailable if UCX cannot start.
  static absl::StatusOr<std::shared_ptr<UcxContext>> Create(const UcxOptions& options);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return h_; }
  // Memory kinds besides host memory the context handles ("cuda", ...).
  const std::vector<std::string>& device_memory_types() const { return device_memory_types_; }

 private:
  UcxContext() = default;
  ucp_context_h h_ = nullptr;
  std::vector<std::string> device_memory_types_;
};

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_CONTEXT_H_
