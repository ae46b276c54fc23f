#include "transport/ucx/internal/in_flight.h"

#include <utility>

#include "transport/ucx/internal/context.h"

namespace tessel {
namespace ucx_internal {

// An operation UCX holds until its callback: listed in its InFlight
// meanwhile.
struct PendingOp {
  PendingOp(InFlight::Done d, std::vector<uint8_t> h) : done(std::move(d)), header(std::move(h)) {}
  InFlight::Done done;
  std::vector<uint8_t> header;  // a send's, alive until completion
  absl::flat_hash_set<PendingOp*>* in_flight = nullptr;
  // Set while the UCX call that starts it runs: UCX may complete it inside
  // that call (ucp_am_recv_data_nbx purges a receive from a peer that went
  // away) and still return a request.
  bool* completed_inside = nullptr;
};

namespace {

void Complete(void* request, ucs_status_t status, void* user_data, const char* what) {
  auto* op = static_cast<PendingOp*>(user_data);
  if (op->completed_inside != nullptr) *op->completed_inside = true;
  if (op->in_flight != nullptr) op->in_flight->erase(op);
  if (op->done) op->done(status == UCS_OK ? absl::OkStatus() : UcsError(what, status));
  delete op;
  ucp_request_free(request);
}

void SendComplete(void* request, ucs_status_t status, void* user_data) {
  Complete(request, status, user_data, "UCX send failed");
}

void RecvComplete(void* request, ucs_status_t status, size_t, void* user_data) {
  Complete(request, status, user_data, "UCX receive failed");
}

}  // namespace

InFlight::~InFlight() { CancelAll(absl::CancelledError("UCX operation abandoned")); }

void InFlight::Start(PendingOp* op, const std::function<ucs_status_ptr_t()>& call,
                     const char* what) {
  // Listed before the call, so a completion inside it finds it.
  bool completed_inside = false;
  op->completed_inside = &completed_inside;
  op->in_flight = &ops_;
  ops_.insert(op);
  const ucs_status_ptr_t r = call();
  if (completed_inside) return;  // its callback ran (and freed it) inside the call
  op->completed_inside = nullptr;
  if (r != nullptr && !UCS_PTR_IS_ERR(r)) return;  // in flight until its callback
  ops_.erase(op);
  if (op->done) op->done(r == nullptr ? absl::OkStatus() : UcsError(what, UCS_PTR_STATUS(r)));
  delete op;
}

void InFlight::Send(ucp_ep_h ep, unsigned id, std::vector<uint8_t> header, const void* payload,
                    size_t bytes, Done done) {
  auto* op = new PendingOp(std::move(done), std::move(header));
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.send = &SendComplete;
  rp.user_data = op;
  rp.flags = UCP_AM_SEND_FLAG_REPLY;
  Start(
      op,
      [&] {
        return ucp_am_send_nbx(ep, id, op->header.data(), op->header.size(), payload, bytes, &rp);
      },
      "ucp_am_send_nbx");
}

void InFlight::Receive(ucp_worker_h worker, void* data, void* dst, size_t length, Done done) {
  auto* op = new PendingOp(std::move(done), {});
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.recv_am = &RecvComplete;
  rp.user_data = op;
  Start(
      op, [&] { return ucp_am_recv_data_nbx(worker, data, dst, length, &rp); },
      "ucp_am_recv_data_nbx");
}

void InFlight::CancelAll(const absl::Status& why) {
  // A `done` may start new operations; those stay.
  std::vector<PendingOp*> left(ops_.begin(), ops_.end());
  ops_.clear();
  for (PendingOp* op : left) {
    if (op->done) op->done(why);
    delete op;
  }
}

}  // namespace ucx_internal
}  // namespace tessel
