// UcxTransport's zero-copy path (ucx_transport.h, "Payload memory"): the
// sender's DESCRIPTOR of a payload in payload memory and the receiver's
// RELEASE of it, with the checks a peer's descriptor and release must pass
// (descriptor_codec.h: the payload inside its region; SendLeases: a RELEASE
// only from the peer the lease went to). Split from ucx_transport.cc by
// concept; the same class, the same progress thread.
#include <cstring>
#include <optional>

#include "runtime/log.h"
#include "transport/ucx/internal/am_ids.h"
#include "transport/ucx/internal/descriptor_codec.h"
#include "transport/ucx/internal/in_flight.h"
#include "transport/ucx/internal/payload_memory.h"
#include "transport/ucx/internal/progress_loop.h"
#include "transport/ucx/internal/remote_key_cache.h"
#include "transport/ucx/internal/send_leases.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {
using ucx_internal::DescriptorFields;
using ucx_internal::kDescriptorAmId;
using ucx_internal::kReleaseAmId;
using ucx_internal::MessageDelivered;
using ucx_internal::ReleaseStatus;
}  // namespace

std::shared_ptr<PayloadMemory> UcxTransport::payload_memory() { return memory_; }

bool UcxTransport::SendDescriptor(PeerId to, std::vector<uint8_t>& header, const void* payload,
                                  size_t bytes, SendDone& done) {
  std::optional<ucx_internal::UcxPayloadMemory::Found> region = memory_->Find(payload, bytes);
  if (!region.has_value()) return false;
  const uint64_t lease = leases_->Open({to, std::move(done), header, payload, bytes});
  DescriptorFields fields;
  fields.lease = lease;
  fields.region = region->id;
  fields.remote_base = region->base;
  fields.region_bytes = region->bytes;
  fields.offset = reinterpret_cast<uintptr_t>(payload) - region->base;
  fields.bytes = bytes;
  std::vector<uint8_t> descriptor = ucx_internal::EncodeDescriptor(
      fields, header,
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(region->rkey->data()),
                          region->rkey->size()));
  // The descriptor's own send only matters if it fails: then the lease ends.
  in_flight_->Send(peers_[to].ep, kDescriptorAmId, std::move(descriptor), nullptr, 0,
                   [this, lease](absl::Status s) {
                     if (!s.ok()) leases_->End(lease, s);
                   });
  return true;
}

void UcxTransport::SendRelease(PeerId to, uint64_t lease, ReleaseStatus status) {
  if (to >= peers_.size() || peers_[to].failed || peers_[to].ep == nullptr) return;
  // The message must outlive a send UCX queues; the callback frees it.
  auto* message = new std::vector<uint8_t>(ucx_internal::EncodeRelease({lease, status}));
  ucp_request_param_t rp{};
  // With a reply endpoint: the sender takes a RELEASE only from the peer
  // its lease went to (OnRelease).
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_AM_SEND_FLAG_REPLY;
  rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
    delete static_cast<std::vector<uint8_t>*>(user_data);
    ucp_request_free(request);
  };
  rp.user_data = message;
  ucs_status_ptr_t r = ucp_am_send_nbx(peers_[to].ep, kReleaseAmId, message->data(),
                                       message->size(), nullptr, 0, &rp);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete message;
}

ucs_status_t UcxTransport::OnDescriptor(void* arg, const void* header, size_t header_length, void*,
                                        size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  absl::StatusOr<ucx_internal::DescriptorView> d = ucx_internal::DecodeDescriptor(
      absl::MakeConstSpan(static_cast<const uint8_t*>(header), header_length));
  if (!d.ok()) {  // nothing of it is read (e.g. a payload outside its region)
    ++self->dropped_descriptors_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: dropping a malformed payload descriptor: " << d.status().message();
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    TESSEL_LOG(WARNING) << "ucx: dropping a payload descriptor without a reply endpoint";
    return UCS_OK;
  }
  const DescriptorFields& head = d->fields;
  ucp_ep_h ep = param->reply_ep;
  const PeerId from = self->PeerForEp(ep);
  if (from == kNoPeerId) return UCS_OK;  // the peer table is full: nothing is read
  self->Delivered(from);
  absl::StatusOr<ucx_internal::RemoteKey*> key = self->keys_->Get(
      ep, self->worker_, head.region, d->rkey, head.remote_base, head.region_bytes, absl::Now());
  if (!key.ok() && absl::IsInvalidArgument(key.status())) {
    // The region was described otherwise before: nothing of it is read.
    ++self->dropped_descriptors_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: dropping a payload descriptor: " << key.status().message();
    self->SendRelease(from, head.lease, ReleaseStatus::kDropped);
    return UCS_OK;
  }
  if (!key.ok() || (*key)->mapped == nullptr) {
    // Not unpackable (e.g. another pod's shared memory) or not mappable here
    // (another host, no shared-memory transport in common): the sender
    // sends it again through the queues, and sends everything to this
    // endpoint that way from now on. (UCX 1.13 cannot start an RMA get on a
    // reply endpoint, so no get instead.)
    if (!key.ok()) {
      TESSEL_LOG(WARNING) << "ucx: cannot reach a peer's payload memory (" << key.status().message()
                          << "); it sends through the queues instead";
    }
    self->SendRelease(from, head.lease, ReleaseStatus::kResend);
    return UCS_OK;
  }
  if (self->keys_->IsBorrowed(from, head.lease)) {
    // A lease this peer lent before and the receiver still reads: a replay.
    // Dropped unread and unanswered (a RELEASE would end the real send).
    ++self->dropped_descriptors_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: dropping a payload descriptor that names lease " << head.lease
        << ", which its peer lent before and is still borrowed";
    return UCS_OK;
  }
  Incoming in;
  in.from = from;
  in.header = d->header;
  in.payload_bytes = head.bytes;
  in.in_place = (*key)->mapped + head.offset;
  in.lease = head.lease;
  Accept accept = self->handler_ ? self->handler_(in) : Accept{};
  if (accept.borrow) {
    self->keys_->Borrow(from, head.lease, *key);
    self->peers_[from].path = "in place";
    return UCS_OK;
  }
  if (accept.dst == nullptr || head.bytes == 0) {
    if (accept.dst != nullptr && accept.done) accept.done(absl::OkStatus());
    self->SendRelease(from, head.lease, ReleaseStatus::kDropped);
    return UCS_OK;
  }
  if (head.bytes > accept.capacity) {  // never written past the receiver's room
    ++self->dropped_oversized_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10) << "ucx: dropping an in-place payload of " << head.bytes
                                        << " bytes: its receiver has room for " << accept.capacity;
    if (accept.done) accept.done(PayloadTooLarge(head.bytes, accept.capacity));
    self->SendRelease(from, head.lease, ReleaseStatus::kDropped);
    return UCS_OK;
  }
  std::memcpy(accept.dst, in.in_place, head.bytes);
  self->peers_[from].path = "in place";
  if (accept.done) accept.done(absl::OkStatus());
  self->SendRelease(from, head.lease, ReleaseStatus::kReadInPlace);
  return UCS_OK;
}

ucs_status_t UcxTransport::OnRelease(void* arg, const void* header, size_t header_length, void*,
                                     size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  absl::StatusOr<ucx_internal::Release> m = ucx_internal::DecodeRelease(
      absl::MakeConstSpan(static_cast<const uint8_t*>(header), header_length));
  if (!m.ok()) {
    TESSEL_LOG(WARNING) << "ucx: dropping a malformed release: " << m.status().message();
    return UCS_OK;
  }
  // Only the peer the lease was sent to ends it (SendLeases::TakeFrom): the
  // endpoint the RELEASE arrived on must be that peer's.
  auto peer = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                  ? self->peer_by_ep_.find(param->reply_ep)
                  : self->peer_by_ep_.end();
  std::optional<ucx_internal::SendLeases::Lease> held =
      peer == self->peer_by_ep_.end() ? std::nullopt
                                      : self->leases_->TakeFrom(m->lease, peer->second);
  if (!held.has_value()) {
    // Ended already (a late duplicate), or not this sender's to end.
    if (peer == self->peer_by_ep_.end()) {
      ++self->dropped_releases_;
    } else if (self->leases_->misdirected() != self->misdirected_releases_.load()) {
      self->misdirected_releases_ = self->leases_->misdirected();
    } else {
      return UCS_OK;  // a late duplicate
    }
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: ignoring a RELEASE that is not its sender's to give ("
        << self->dropped_releases_.load() + self->misdirected_releases_.load() << " so far)";
    return UCS_OK;
  }
  ucx_internal::SendLeases::Lease& lease = *held;
  if (m->status == ReleaseStatus::kResend && lease.peer < self->peers_.size()) {
    self->peers_[lease.peer].in_place = false;
    self->peers_[lease.peer].path = self->peers_[lease.peer].copied;
    self->DoSend(lease.peer, std::move(lease.header), lease.payload, lease.bytes,
                 std::move(lease.done));
    return UCS_OK;
  }
  if (m->status == ReleaseStatus::kReadInPlace && lease.peer < self->peers_.size()) {
    self->peers_[lease.peer].path = "in place";
  }
  if (lease.done) lease.done(absl::OkStatus());
  return UCS_OK;
}

void UcxTransport::Release(PeerId from, uint64_t lease) {
  loop_->Post([this, from, lease] {
    bool tell_sender = false;
    if (keys_->EndBorrow(from, lease, &tell_sender) && tell_sender) {
      SendRelease(from, lease, ReleaseStatus::kReadInPlace);
    }
  });
}

}  // namespace tessel
