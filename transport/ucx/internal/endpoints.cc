#include "transport/ucx/internal/endpoints.h"

#include <cstdio>
#include <cstdlib>

#include "transport/ucx/internal/context.h"

namespace tessel {
namespace ucx_internal {
namespace {

class UcpRemoteKeyOps : public RemoteKeyOps {
 public:
  absl::StatusOr<void*> Unpack(void* ep, absl::Span<const uint8_t> packed) override {
    ucp_rkey_h rkey = nullptr;
    ucs_status_t s = ucp_ep_rkey_unpack(static_cast<ucp_ep_h>(ep), packed.data(), &rkey);
    if (s != UCS_OK) return UcsError("ucp_ep_rkey_unpack", s);
    return static_cast<void*>(rkey);
  }
  char* Map(void* rkey, uint64_t remote_base) override {
    void* local = nullptr;
    if (ucp_rkey_ptr(static_cast<ucp_rkey_h>(rkey), remote_base, &local) != UCS_OK) {
      return nullptr;
    }
    return static_cast<char*>(local);
  }
  void Destroy(void* rkey) override { ucp_rkey_destroy(static_cast<ucp_rkey_h>(rkey)); }
  void DestroyWorker(void* worker) override {
    ucp_worker_destroy(static_cast<ucp_worker_h>(worker));
  }
};

}  // namespace

ucp_ep_params_t EndpointParams(const std::string& address, bool peer_error_handling,
                               ucp_err_handler_cb_t on_error, void* arg) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (on_error != nullptr) {
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = on_error;
    ep.err_handler.arg = arg;
  }
  return ep;
}

EpLanes LanesOf(ucp_ep_h ep) {
  // ucp_ep_print_info is the one public view of the lanes in UCX 1.13.
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return {};
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  EpLanes lanes = ParseEpInfo(absl::string_view(buf, len));
  std::free(buf);
  return lanes;
}

void CloseLater(ucp_ep_h ep) {
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  cp.cb.send = [](void* request, ucs_status_t, void*) { ucp_request_free(request); };
  (void)ucp_ep_close_nbx(ep, &cp);  // done at once, or freed by the callback
}

std::unique_ptr<RemoteKeyOps> MakeUcpRemoteKeyOps() { return std::make_unique<UcpRemoteKeyOps>(); }

}  // namespace ucx_internal
}  // namespace tessel
