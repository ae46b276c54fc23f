#include "transport/ucx/ucx_transport.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "runtime/log.h"
#include "transport/ucx/internal/am_ids.h"
#include "transport/ucx/internal/context.h"
#include "transport/ucx/internal/descriptor_codec.h"
#include "transport/ucx/internal/endpoints.h"
#include "transport/ucx/internal/ep_lanes.h"
#include "transport/ucx/internal/in_flight.h"
#include "transport/ucx/internal/payload_memory.h"
#include "transport/ucx/internal/progress_loop.h"
#include "transport/ucx/internal/remote_key_cache.h"
#include "transport/ucx/internal/send_leases.h"
#include "transport/ucx/internal/wedge_judge.h"
#include "transport/ucx/internal/wedge_probe.h"

namespace tessel {
namespace {
using ucx_internal::kAmId;
using ucx_internal::kDescriptorAmId;
using ucx_internal::kHelloAmId;
using ucx_internal::kProbeAmId;
using ucx_internal::kReleaseAmId;
using ucx_internal::MessageDelivered;
using ucx_internal::MessageSent;
using ucx_internal::UcsError;
}  // namespace

UcxTransport::UcxTransport(const UcxOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(const UcxOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(UcxOptions with_env, WithUcxEnvironment(options));
  if (std::getenv("TESSEL_UCX_SPIN_US") != nullptr) {
    TESSEL_LOG(WARNING) << "TESSEL_UCX_SPIN_US is no longer read; pass --ucx_spin_us instead";
  }
  std::unique_ptr<UcxTransport> t(new UcxTransport(with_env));
  TESSEL_RETURN_IF_ERROR(t->Init());
  return t;
}

absl::Status UcxTransport::Init() {
  TESSEL_ASSIGN_OR_RETURN(context_, ucx_internal::UcxContext::Create(options_));
  device_memory_types_ = context_->device_memory_types();
  memory_ = std::make_shared<ucx_internal::UcxPayloadMemory>(context_);
  keys_ = std::make_unique<ucx_internal::RemoteKeyCache>(ucx_internal::MakeUcpRemoteKeyOps());
  in_flight_ = std::make_unique<ucx_internal::InFlight>();
  leases_ = std::make_unique<ucx_internal::SendLeases>();
  judge_ = std::make_unique<ucx_internal::WedgeJudge>();
  TESSEL_ASSIGN_OR_RETURN(probe_, ucx_internal::WedgeProbe::Create(context_->get()));
  spin_policy_ =
      std::make_unique<SpinPolicy>(options_.poll_mode, options_.spin, 1, "UCX progress thread");
  TESSEL_ASSIGN_OR_RETURN(
      loop_, ucx_internal::ProgressLoop::Create([p = spin_policy_.get()] { return p->Window(); }));
  TESSEL_RETURN_IF_ERROR(CreateWorker());
  loop_->Start({[this] { return worker_ != nullptr; }, [this] { return Progress(); },
                [this] { return ucp_worker_arm(worker_) != UCS_ERR_BUSY; }});
  return absl::OkStatus();
}

bool UcxTransport::Progress() {
  // Bounded: under a steady stream ucp_worker_progress never returns 0, and
  // the probe and the queued sends must get their turn.
  constexpr int kMaxRounds = 16;
  bool did = false;
  for (int round = 0; round < kMaxRounds && ucp_worker_progress(worker_) != 0; ++round) {
    did = true;
  }
  judge_->Pass(did);
  if (probe_->Progress()) did = true;
  return did;
}

absl::Status UcxTransport::CreateWorker() {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t s = ucp_worker_create(context_->get(), &wp, &worker_);
  if (s != UCS_OK) {
    worker_ = nullptr;
    return UcsError("ucp_worker_create", s);
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  s = ucp_worker_get_address(worker_, &addr, &len);
  if (s != UCS_OK) return UcsError("ucp_worker_get_address", s);
  std::string address(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(worker_, addr);

  for (const auto& [id, cb] :
       {std::pair<unsigned, ucp_am_recv_callback_t>{kAmId, &OnAm},
        std::pair<unsigned, ucp_am_recv_callback_t>{kDescriptorAmId, &OnDescriptor},
        std::pair<unsigned, ucp_am_recv_callback_t>{kReleaseAmId, &OnRelease},
        std::pair<unsigned, ucp_am_recv_callback_t>{kHelloAmId, &OnHello}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = this;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return UcsError("ucp_worker_set_am_recv_handler", s);
  }

  s = ucp_worker_get_efd(worker_, &ucp_fd_);
  if (s != UCS_OK) return UcsError("ucp_worker_get_efd", s);
  TESSEL_RETURN_IF_ERROR(loop_->Watch(ucp_fd_));
  TESSEL_RETURN_IF_ERROR(probe_->Attach(worker_, address, kProbeAmId));
  judge_->SetProbePath(ucx_internal::LanesOf(probe_->ep()).am);
  absl::MutexLock lock(&address_mu_);
  address_ = std::move(address);
  return absl::OkStatus();
}

void UcxTransport::DestroyWorker(const absl::Status& why) {
  // Descriptor sends will never be released through this worker.
  std::vector<ucx_internal::SendLeases::Lease> unreleased = leases_->TakeAll();
  // Remote keys go before their worker; a borrowed one stays (retired), and
  // so does the worker, until the borrow ends.
  const bool kept = worker_ != nullptr && keys_->RetireWorker(worker_);
  std::vector<std::pair<ucp_worker_h, void*>> closing;
  if (void* r = probe_->Close()) closing.emplace_back(probe_->worker(), r);
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h ep : spare_eps_) {
    void* r = ucp_ep_close_nbx(ep, &cp);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.emplace_back(worker_, r);
  }
  spare_eps_.clear();
  hello_eps_.clear();
  for (Peer& p : peers_) {
    if (p.owned && p.ep != nullptr && worker_ != nullptr) {
      void* r = ucp_ep_close_nbx(p.ep, &cp);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.emplace_back(worker_, r);
    }
    // Its PeerId stays taken and fails from now on.
    p.ep = nullptr;
    p.failed = true;
  }
  peer_by_ep_.clear();
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  for (auto [w, r] : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS && absl::Now() < deadline) {
      ucp_worker_progress(w);
    }
    if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
  }
  if (worker_ != nullptr) {
    loop_->Unwatch(ucp_fd_);
    if (!kept) ucp_worker_destroy(worker_);  // else the key cache destroys it
    worker_ = nullptr;
    ucp_fd_ = -1;
  }
  for (ucx_internal::SendLeases::Lease& lease : unreleased) {
    if (lease.done) lease.done(why);
  }
  // Operations towards dead peers never complete: they end here. (Any that
  // the destroy completed have removed themselves.)
  in_flight_->CancelAll(why);
}

UcxTransport::~UcxTransport() { Shutdown(); }

UcxTransport::LateProbes UcxTransport::late_probes() const {
  if (judge_ == nullptr) return {};
  return {judge_->late_starved(), judge_->late_moving()};
}

UcxTransport::Refusals UcxTransport::refusals() const {
  Refusals r;
  r.oversized = dropped_oversized_.load();
  r.descriptors = dropped_descriptors_.load();
  r.releases = dropped_releases_.load();
  r.misdirected_releases = misdirected_releases_.load();
  r.hellos = refused_hellos_.load();
  r.peers = refused_peers_.load();
  return r;
}

std::string UcxTransport::address() const {
  absl::MutexLock lock(&address_mu_);
  return address_;
}

absl::Status UcxTransport::CheckReceiveQueue(absl::Duration timeout) {
  const uint64_t seq = probe_->NextSeq();
  const uint64_t before = judge_->Movement();
  if (!loop_->Post([this, seq] {
        probe_->Send(seq);
        judge_->ProbeSent();
      })) {
    return absl::UnavailableError("transport is shut down");
  }
  absl::Status probe = probe_->Await(seq, timeout);
  if (probe.ok()) return probe;
  // Late. Judge only once the progress thread has had its chances (a thread
  // starved of CPU, or deep in a long call, has not had them; one asleep on
  // its event fd is woken for them), for at most kPatience more.
  constexpr absl::Duration kPatience = absl::Seconds(30);
  const absl::Time give_up = absl::Now() + kPatience;
  while (!probe.ok() && !judge_->HadChances(probe_->Sent(seq)) && absl::Now() < give_up) {
    if (!loop_->Post([] {})) return absl::UnavailableError("transport is shut down");
    probe = probe_->Await(seq, absl::Milliseconds(10));
  }
  return judge_->Judge(probe, probe_->Sent(seq), before, timeout);
}

void UcxTransport::Delivered(PeerId from) {
  if (from < peers_.size() && peers_[from].on_probe_path) judge_->Delivered();
}

absl::Status UcxTransport::Reset() {
  absl::Status result = absl::UnavailableError("transport is shut down");
  loop_->Call([this, &result] {
    DestroyWorker(absl::UnavailableError(
        "UCX worker reset (its receive queue was wedged); connect to the new address"));
    result = CreateWorker();
  });
  return result;
}

void UcxTransport::SetHandler(Handler handler) {
  // Installed through the queue so the progress thread sees it without a race.
  loop_->Call([this, &handler] { handler_ = std::move(handler); });
}

UcxTransport::Peer UcxTransport::NewPeer(ucp_ep_h ep, bool owned) const {
  Peer p;
  p.ep = ep;
  p.owned = owned;
  // Chosen here, once: payload memory goes as descriptors only where UCX
  // put a shared-memory transport that can map the peer's memory on this
  // endpoint; elsewhere it goes through UCX's rendezvous, which moves large
  // payloads by RMA (get or put) on the endpoint's rma_bw lanes (cma,
  // tcp, rc...) straight between the two buffers.
  const ucx_internal::EpLanes lanes = ucx_internal::LanesOf(ep);
  p.copied = ucx_internal::DescribeCopied(lanes);
  p.in_place = options_.zero_copy && lanes.mappable;
  p.path = p.in_place ? "in place" : p.copied;
  p.on_probe_path = judge_->OnProbePath(lanes.am);
  return p;
}

PeerId UcxTransport::PeerForEp(ucp_ep_h ep) {
  auto it = peer_by_ep_.find(ep);
  if (it != peer_by_ep_.end()) return it->second;
  if (peer_by_ep_.size() >= kMaxPeers) {
    ++refused_peers_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: refusing messages from a new endpoint: " << kMaxPeers
        << " peers are connected already (" << refused_peers_.load() << " refused so far)";
    return kNoPeerId;
  }
  PeerId id = peers_.size();
  peers_.push_back(NewPeer(ep, /*owned=*/false));
  peer_by_ep_[ep] = id;
  return id;
}

void UcxTransport::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  auto it = self->peer_by_ep_.find(ep);
  if (it == self->peer_by_ep_.end()) return;
  Peer& p = self->peers_[it->second];
  p.failed = true;
  if (p.adopted) {
    // Nobody connects to a dead peer's reply endpoint again: close it (UCX
    // frees it later, so its address leaves the map now) and fail its PeerId.
    self->peer_by_ep_.erase(it);
    p.ep = nullptr;
    ucx_internal::CloseLater(ep);
  }
}

void UcxTransport::SendHello(ucp_ep_h ep) {
  // The address rides as the payload (a worker address can outgrow an AM
  // header); it lives until the send completes.
  auto* me = new std::string(address());
  in_flight_->Send(ep, kHelloAmId, {}, me->data(), me->size(), [me](absl::Status) { delete me; });
}

ucs_status_t UcxTransport::OnHello(void* arg, const void*, size_t, void* data, size_t length,
                                   const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length == 0) {
    return UCS_OK;
  }
  // Not inside UCX's progress: an endpoint is made on the loop's next turn.
  std::string address(static_cast<const char*>(data), length);
  self->loop_->Post([self, reply = param->reply_ep, address = std::move(address)] {
    self->Adopt(reply, address);
  });
  return UCS_OK;
}

void UcxTransport::Adopt(ucp_ep_h reply, const std::string& address) {
  if (worker_ == nullptr) return;
  auto known = peer_by_ep_.find(reply);
  if (known != peer_by_ep_.end() && peers_[known->second].owned) {
    return;  // ours already: both sides connected and UCX paired the two
  }
  // One HELLO per endpoint, and a bounded number of endpoints dialed for
  // HELLOs at all: a stranger repeating HELLO (with third parties'
  // addresses) cannot make this process dial without end.
  if (!hello_eps_.insert(reply).second || hello_eps_.size() > kMaxPeers ||
      spare_eps_.size() >= kMaxSpareEndpoints) {
    ++refused_hellos_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10)
        << "ucx: ignoring a HELLO (a repeated one, or " << kMaxSpareEndpoints
        << " unmatched ones already; " << refused_hellos_.load() << " ignored so far)";
    return;
  }
  // UCX matches an endpoint made to a peer that already connected here with
  // the one its connection made: the same handle comes back, now ours (UCX
  // keeps it until we close it and calls OnEpError when the peer fails).
  // The error handler in either error mode: where UCX finds a peer dead
  // (tcp), OnEpError closes the endpoint instead of UCX destroying it under us.
  ucp_ep_params_t params = ucx_internal::EndpointParams(address, options_.peer_error_handling,
                                                        &UcxTransport::OnEpError, this);
  ucp_ep_h h = nullptr;
  if (ucp_ep_create(worker_, &params, &h) != UCS_OK) return;
  if (h != reply) {
    // Not matched (the two sides' connection numbers differ, or the reply
    // endpoint is gone already): a second connection is not used (the
    // peer's remote-key cache is keyed by the endpoint its messages come
    // on); answers keep going through the reply endpoint. It is closed at
    // shutdown, not now: UCX 1.13 asserts when a worker is destroyed with a
    // force-closed endpoint's wireup still queued.
    spare_eps_.push_back(h);
    return;
  }
  const PeerId id = PeerForEp(reply);
  if (id == kNoPeerId) {
    spare_eps_.push_back(h);  // the table is full: closed at shutdown
    return;
  }
  Peer& p = peers_[id];
  p.owned = true;
  p.adopted = true;
}

absl::StatusOr<PeerId> UcxTransport::Connect(absl::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("empty UCX address");
  std::string addr(address);
  absl::StatusOr<PeerId> result = absl::UnavailableError("transport is shut down");
  loop_->Call([&] {
    ucp_ep_params_t ep = ucx_internal::EndpointParams(
        addr, options_.peer_error_handling,
        options_.peer_error_handling ? &UcxTransport::OnEpError : nullptr, this);
    ucp_ep_h h = nullptr;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &h);
    if (s != UCS_OK) {
      result = absl::UnavailableError(
          absl::StrCat("cannot connect to UCX peer: ", ucs_status_string(s),
                       options_.peer_error_handling
                           ? " (peer error handling needs a transport such as tcp in UCX_TLS)"
                           : ""));
    } else {
      PeerId id = peers_.size();
      peers_.push_back(NewPeer(h, /*owned=*/true));
      peer_by_ep_[h] = id;
      result = id;
      peers_[id].hello = true;  // said with the first send
    }
  });
  return result;
}
void UcxTransport::Send(PeerId to, absl::Span<const uint8_t> header, const void* payload,
                        size_t payload_bytes, SendDone done) {
  MessageSent();
  std::vector<uint8_t> h(header.begin(), header.end());
  auto shared_done = std::make_shared<SendDone>(std::move(done));
  const bool posted =
      loop_->Post([this, to, h = std::move(h), payload, payload_bytes, shared_done] {
        DoSend(to, std::move(h), payload, payload_bytes, std::move(*shared_done));
      });
  if (!posted && *shared_done) (*shared_done)(absl::CancelledError("transport is shut down"));
}

void UcxTransport::DoSend(PeerId to, std::vector<uint8_t> header, const void* payload, size_t bytes,
                          SendDone done) {
  if (to >= peers_.size()) {
    if (done) done(absl::InvalidArgumentError(absl::StrCat("unknown UCX peer ", to)));
    return;
  }
  if (peers_[to].failed) {
    if (done) done(absl::UnavailableError(absl::StrCat("UCX peer ", to, " has failed")));
    return;
  }
  if (peers_[to].hello) {
    // Ahead of the first message, so the receiver can answer safely (OnHello).
    // Not at Connect: UCX 1.13 asserts when a worker is destroyed with a
    // send still queued behind the endpoint's wireup.
    peers_[to].hello = false;
    SendHello(peers_[to].ep);
  }
  if (options_.zero_copy && bytes >= options_.in_place_min_bytes && peers_[to].in_place &&
      SendDescriptor(to, header, payload, bytes, done)) {
    return;
  }
  in_flight_->Send(peers_[to].ep, kAmId, std::move(header), payload, bytes, std::move(done));
}

ucs_status_t UcxTransport::OnAm(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  Incoming in;
  const bool has_reply = param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
  in.from = has_reply ? self->PeerForEp(param->reply_ep) : kNoPeerId;
  if (has_reply && in.from == kNoPeerId) return UCS_OK;  // the peer table is full
  in.header = absl::MakeConstSpan(static_cast<const uint8_t*>(header), header_length);
  in.payload_bytes = length;
  self->Delivered(in.from);
  Accept accept = self->handler_ ? self->handler_(in) : Accept{};
  if (length == 0) {
    if (accept.done) accept.done(absl::OkStatus());
    return UCS_OK;
  }
  if (accept.dst == nullptr) return UCS_OK;  // refused: UCX releases the data
  if (length > accept.capacity) {
    // Never written past the room its receiver gave (transport.h); UCX
    // releases the data.
    ++self->dropped_oversized_;
    TESSEL_LOG_EVERY_N_SEC(WARNING, 10) << "ucx: dropping a payload of " << length
                                        << " bytes: its receiver has room for " << accept.capacity;
    if (accept.done) accept.done(PayloadTooLarge(length, accept.capacity));
    return UCS_OK;
  }
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    std::memcpy(accept.dst, data, length);
    if (accept.done) accept.done(absl::OkStatus());
    return UCS_OK;
  }
  // The payload landing later is movement too (a large one takes a while).
  self->in_flight_->Receive(self->worker_, data, accept.dst, length,
                            [self, from = in.from, done = std::move(accept.done)](absl::Status s) {
                              if (s.ok()) self->Delivered(from);
                              if (done) done(s);
                            });
  return UCS_OK;
}

std::string UcxTransport::PayloadPath(PeerId peer) {
  std::string path = "copied";
  loop_->Call([&] {
    if (peer < peers_.size()) path = peers_[peer].path;
  });
  return path;
}

void UcxTransport::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (loop_ == nullptr) return;  // Init failed before the loop existed
  loop_->Stop();
  // The progress thread is gone: this thread now owns the workers.
  if (probe_ != nullptr) DestroyWorker(absl::CancelledError("UCX transport shut down"));
  // Borrows end here (their readers must have stopped): keys, then workers.
  if (keys_ != nullptr) keys_->Clear();
  probe_.reset();
  // The context goes with the last of this transport and its payload
  // memory (memory must be unmapped before ucp_cleanup).
  context_.reset();
  worker_ = nullptr;
}

}  // namespace tessel
