#include "transport/ucx/internal/wedge_probe.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/ucx/internal/context.h"

namespace tessel {
namespace ucx_internal {

absl::StatusOr<std::unique_ptr<WedgeProbe>> WedgeProbe::Create(ucp_context_h context) {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  ucs_status_t s = ucp_worker_create(context, &wp, &worker);
  if (s != UCS_OK) return UcsError("ucp_worker_create (probe)", s);
  return std::unique_ptr<WedgeProbe>(new WedgeProbe(worker));
}

WedgeProbe::~WedgeProbe() { ucp_worker_destroy(worker_); }

absl::Status WedgeProbe::Attach(ucp_worker_h target, const std::string& target_address,
                                unsigned am_id) {
  am_id_ = am_id;
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = am_id;
  hp.cb = &WedgeProbe::OnProbe;
  hp.arg = this;
  ucs_status_t s = ucp_worker_set_am_recv_handler(target, &hp);
  if (s != UCS_OK) return UcsError("ucp_worker_set_am_recv_handler", s);
  // As a peer on this host would reach it (shared memory when UCX_TLS
  // allows it).
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(target_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  s = ucp_ep_create(worker_, &ep, &ep_);
  if (s != UCS_OK) {
    ep_ = nullptr;
    return UcsError("ucp_ep_create (probe)", s);
  }
  return absl::OkStatus();
}

void* WedgeProbe::Close() {
  if (ep_ == nullptr) return nullptr;
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* r = ucp_ep_close_nbx(ep_, &cp);
  ep_ = nullptr;
  return r != nullptr && !UCS_PTR_IS_ERR(r) ? r : nullptr;
}

void WedgeProbe::Send(uint64_t seq) {
  if (ep_ == nullptr) return;
  // The header must outlive a send UCX queues; the callback frees it.
  struct ProbeSend {
    WedgeProbe* self;
    uint64_t seq;
  };
  auto* send = new ProbeSend{this, seq};
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
    auto* done = static_cast<ProbeSend*>(user_data);
    --done->self->pending_;
    delete done;
    ucp_request_free(request);
  };
  rp.user_data = send;
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, am_id_, &send->seq, sizeof(send->seq), nullptr, 0, &rp);
  if (!UCS_PTR_IS_ERR(r)) sent_.store(std::max(sent_.load(), seq));
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete send;
  } else {
    ++pending_;  // the probe worker is progressed until it completes
  }
}

bool WedgeProbe::Progress() {
  bool did = false;
  if (pending_ > 0) {
    while (ucp_worker_progress(worker_) != 0) did = true;
  }
  return did;
}

ucs_status_t WedgeProbe::OnProbe(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t*) {
  auto* self = static_cast<WedgeProbe*>(arg);
  uint64_t seq = 0;
  if (header_length == sizeof(seq)) std::memcpy(&seq, header, sizeof(seq));
  absl::MutexLock lock(&self->mu_);
  self->seen_ = std::max(self->seen_, seq);
  return UCS_OK;
}

absl::Status WedgeProbe::Await(uint64_t seq, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return seen_ >= seq; };
  if (mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this process's UCX receive queue is wedged: a probe sent to its own address did not "
      "arrive within ",
      absl::FormatDuration(timeout),
      " (a peer on this host was probably killed while writing a message into it)"));
}

}  // namespace ucx_internal
}  // namespace tessel
