// What UcxTransport does to a UCX endpoint that needs none of its state: the
// parameters of an endpoint to a peer's worker address, the lanes UCX chose
// for it (ParseEpInfo of ucp_ep_print_info), closing it without waiting, and
// the remote keys unpacked on it (RemoteKeyCache's operations, on UCP).
//
// Threads: the thread that owns the endpoint's worker (the transport's
// progress thread).
//
// Example:
//   ucp_ep_params_t params = EndpointParams(address, /*peer_error_handling=*/false,
//                                           &OnEpError, this);
//   ucp_ep_h ep = nullptr;
//   if (ucp_ep_create(worker, &params, &ep) == UCS_OK) {
//     const bool in_place = LanesOf(ep).mappable;  // descriptors may be read in place
//     ...
//     CloseLater(ep);
//   }
//   RemoteKeyCache keys(MakeUcpRemoteKeyOps());
#ifndef TESSEL_TRANSPORT_UCX_INTERNAL_ENDPOINTS_H_
#define TESSEL_TRANSPORT_UCX_INTERNAL_ENDPOINTS_H_

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "transport/ucx/internal/ep_lanes.h"
#include "transport/ucx/internal/remote_key_cache.h"

namespace tessel {
namespace ucx_internal {

// An endpoint to the worker at `address` (which must outlive the
// parameters' use by ucp_ep_create), in UCP_ERR_HANDLING_MODE_PEER if
// `peer_error_handling` else NONE; `on_error(arg, ep, status)` (when not
// null) is told of the endpoint's failure.
ucp_ep_params_t EndpointParams(const std::string& address, bool peer_error_handling,
                               ucp_err_handler_cb_t on_error, void* arg);

// The lanes UCX chose for `ep` (empty if they cannot be read).
EpLanes LanesOf(ucp_ep_h ep);

// Force-closes `ep`: at once, or its request is freed when the close
// completes (as the worker is progressed).
void CloseLater(ucp_ep_h ep);

// RemoteKeyCache's operations on UCP: ucp_ep_rkey_unpack, ucp_rkey_ptr,
// ucp_rkey_destroy and ucp_worker_destroy.
std::unique_ptr<RemoteKeyOps> MakeUcpRemoteKeyOps();

}  // namespace ucx_internal
}  // namespace tessel

#endif  // TESSEL_TRANSPORT_UCX_INTERNAL_ENDPOINTS_H_
