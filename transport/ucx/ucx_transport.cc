#include "transport/ucx/ucx_transport.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace tessel {
namespace ucx_internal {
// An operation UCX holds until its callback: listed in the transport's
// in_flight_ meanwhile, so Shutdown can cancel what never completes.
struct PendingOp {
  explicit PendingOp(std::function<void(absl::Status)> d) : done(std::move(d)) {}
  virtual ~PendingOp() = default;
  std::function<void(absl::Status)> done;
  absl::flat_hash_set<PendingOp*>* in_flight = nullptr;
};
}  // namespace ucx_internal

namespace {
using ucx_internal::PendingOp;

// UCX delivers a message after it was sent, but through memory TSan does not
// see (uninstrumented shared-memory queues), so tsan builds record the edge:
// every send releases, every delivery acquires. (Only visible when both ends
// live in one process, as in the conformance tests.)
#if defined(__SANITIZE_THREAD__)
char g_delivery_order;
void MessageSent() { __tsan_release(&g_delivery_order); }
void MessageDelivered() { __tsan_acquire(&g_delivery_order); }
#else
void MessageSent() {}
void MessageDelivered() {}
#endif

constexpr unsigned kAmId = 7;
constexpr unsigned kProbeAmId = 8;  // CheckReceiveQueue's probes

absl::Status UcsError(const char* what, ucs_status_t s) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(s)));
}

struct SendOp : PendingOp {
  SendOp(std::vector<uint8_t> h, SendDone d) : PendingOp(std::move(d)), header(std::move(h)) {}
  std::vector<uint8_t> header;  // UCX 1.13 has no COPY_HEADER: keep it alive until completion
};

struct RecvOp : PendingOp {
  using PendingOp::PendingOp;
};

void SendComplete(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  if (op->in_flight != nullptr) op->in_flight->erase(op);
  if (op->done) {
    op->done(status == UCS_OK ? absl::OkStatus() : UcsError("UCX send failed", status));
  }
  delete op;
  ucp_request_free(request);
}

void RecvComplete(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* op = static_cast<RecvOp*>(user_data);
  if (op->in_flight != nullptr) op->in_flight->erase(op);
  if (op->done) {
    op->done(status == UCS_OK ? absl::OkStatus() : UcsError("UCX receive failed", status));
  }
  delete op;
  ucp_request_free(request);
}

}  // namespace

static UcxOptions WithEnvironment(UcxOptions options) {
  if (const char* spin = std::getenv("TESSEL_UCX_SPIN_US")) {
    options.spin = absl::Microseconds(std::atoll(spin));
  }
  return options;
}

UcxTransport::UcxTransport(const UcxOptions& options) : options_(WithEnvironment(options)) {}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(const UcxOptions& options) {
  std::unique_ptr<UcxTransport> t(new UcxTransport(options));
  absl::Status s = t->Init();
  if (!s.ok()) return s;
  return t;
}

absl::Status UcxTransport::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcsError("ucp_config_read", s);
  if (!options_.tls.empty()) {
    s = ucp_config_modify(config, "TLS", options_.tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("UCX rejected TLS '", options_.tls, "': ", ucs_status_string(s)));
    }
  }
  if (!options_.tcp_port_range.empty()) {
    int lo = 0, hi = 0;
    char rest = 0;
    if (std::sscanf(options_.tcp_port_range.c_str(), "%d-%d%c", &lo, &hi, &rest) != 2 || lo < 1 ||
        hi > 65535 || lo > hi) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("UCX tcp port range '", options_.tcp_port_range,
                       "' must be LO-HI with 1 <= LO <= HI <= 65535"));
    }
    // Transport-level settings are read from the environment when UCX opens
    // its interfaces (ucp_config_modify does not reach them in UCX 1.13):
    // the range is process-wide, as one process has one data endpoint.
    setenv("UCX_TCP_PORT_RANGE", options_.tcp_port_range.c_str(), /*overwrite=*/1);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcsError("ucp_init (is libucx installed and UCX_TLS valid?)", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(context_, &wp, &probe_worker_);
  if (s != UCS_OK) return UcsError("ucp_worker_create (probe)", s);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || event_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = event_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev);
  absl::Status created = CreateWorker();
  if (!created.ok()) return created;

  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::Status UcxTransport::CreateWorker() {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t s = ucp_worker_create(context_, &wp, &worker_);
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

  for (const auto& [id, cb] : {std::pair<unsigned, ucp_am_recv_callback_t>{kAmId, &OnAm},
                               std::pair<unsigned, ucp_am_recv_callback_t>{kProbeAmId, &OnProbe}}) {
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
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = ucp_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ucp_fd_, &ev);

  // The probe endpoint: probe_worker_ -> worker_, as a peer on this host
  // would reach it (shared memory when UCX_TLS allows it).
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  s = ucp_ep_create(probe_worker_, &ep, &probe_ep_);
  if (s != UCS_OK) {
    probe_ep_ = nullptr;
    return UcsError("ucp_ep_create (probe)", s);
  }
  absl::MutexLock lock(&address_mu_);
  address_ = std::move(address);
  return absl::OkStatus();
}

void UcxTransport::DestroyWorker(const absl::Status& why) {
  std::vector<std::pair<ucp_worker_h, void*>> closing;
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  if (probe_ep_ != nullptr) {
    void* r = ucp_ep_close_nbx(probe_ep_, &cp);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.emplace_back(probe_worker_, r);
    probe_ep_ = nullptr;
  }
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
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, ucp_fd_, nullptr);
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
    ucp_fd_ = -1;
  }
  // Operations towards dead peers never complete: they end here. (Any that
  // the destroy completed have removed themselves.)
  std::vector<ucx_internal::PendingOp*> left(in_flight_.begin(), in_flight_.end());
  in_flight_.clear();
  for (ucx_internal::PendingOp* op : left) {
    if (op->done) op->done(why);
    delete op;
  }
}

UcxTransport::~UcxTransport() { Shutdown(); }

std::string UcxTransport::address() const {
  absl::MutexLock lock(&address_mu_);
  return address_;
}

ucs_status_t UcxTransport::OnProbe(void* arg, const void* header, size_t header_length, void*,
                                   size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxTransport*>(arg);
  uint64_t seq = 0;
  if (header_length == sizeof(seq)) std::memcpy(&seq, header, sizeof(seq));
  absl::MutexLock lock(&self->probe_mu_);
  self->probe_seen_ = std::max(self->probe_seen_, seq);
  return UCS_OK;
}

absl::Status UcxTransport::CheckReceiveQueue(absl::Duration timeout) {
  const uint64_t seq = probe_seq_.fetch_add(1) + 1;
  const bool posted = Post([this, seq] {
    if (probe_ep_ == nullptr) return;
    // The header must outlive a send UCX queues; the callback frees it.
    struct ProbeSend {
      UcxTransport* self;
      uint64_t seq;
    };
    auto* send = new ProbeSend{this, seq};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
      auto* done = static_cast<ProbeSend*>(user_data);
      --done->self->probes_pending_;
      delete done;
      ucp_request_free(request);
    };
    rp.user_data = send;
    ucs_status_ptr_t r =
        ucp_am_send_nbx(probe_ep_, kProbeAmId, &send->seq, sizeof(send->seq), nullptr, 0, &rp);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) {
      delete send;
    } else {
      ++probes_pending_;  // the probe worker is progressed until it completes
    }
  });
  if (!posted) return absl::UnavailableError("transport is shut down");
  absl::MutexLock lock(&probe_mu_);
  auto arrived = [this, seq]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(probe_mu_) { return probe_seen_ >= seq; };
  if (probe_mu_.AwaitWithTimeout(absl::Condition(&arrived), timeout)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "this process's UCX receive queue is wedged: a probe sent to its own address did not "
      "arrive within ",
      absl::FormatDuration(timeout),
      " (a peer on this host was probably killed while writing a message into it)"));
}

absl::Status UcxTransport::Reset() {
  absl::Status result = absl::UnavailableError("transport is shut down");
  absl::Notification done;
  const bool posted = Post([this, &result, &done] {
    DestroyWorker(absl::UnavailableError(
        "UCX worker reset (its receive queue was wedged); connect to the new address"));
    result = CreateWorker();
    done.Notify();
  });
  if (!posted) return result;
  done.WaitForNotification();
  return result;
}

void UcxTransport::SetHandler(Handler handler) {
  // Installed through the queue so the progress thread sees it without a race.
  absl::Notification set;
  if (Post([this, &handler, &set] {
        handler_ = std::move(handler);
        set.Notify();
      })) {
    set.WaitForNotification();
  }
}

bool UcxTransport::Post(std::function<void()> task) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    tasks_.push_back(std::move(task));
    wake = sleeping_;
  }
  if (wake) {
    uint64_t one = 1;
    ssize_t unused = write(event_fd_, &one, sizeof(one));
    (void)unused;
  }
  return true;
}

bool UcxTransport::RunTasks() {
  std::deque<std::function<void()>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
  return !tasks.empty();
}

void UcxTransport::Loop() {
  absl::Time last_active = absl::Now();
  for (;;) {
    bool did = RunTasks();
    {
      absl::MutexLock lock(&mu_);
      if (stop_ && tasks_.empty()) break;
    }
    if (worker_ == nullptr) {  // a failed Reset: nothing to progress
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    while (ucp_worker_progress(worker_) != 0) did = true;
    // The probe worker only has work while a probe send is queued (an
    // eager probe completes at once): keep it off the data path otherwise.
    if (probes_pending_ > 0) {
      while (ucp_worker_progress(probe_worker_) != 0) did = true;
    }
    if (did) {
      last_active = absl::Now();
      continue;
    }
    if (absl::Now() - last_active < options_.spin) {
      sched_yield();
      continue;
    }
    ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) continue;
    {
      absl::MutexLock lock(&mu_);
      if (!tasks_.empty() || stop_) continue;
      sleeping_ = true;
    }
    epoll_event evs[2];
    // The timeout bounds the cost of a missed wake-up, never correctness.
    int n = epoll_wait(epoll_fd_, evs, 2, 50);
    {
      absl::MutexLock lock(&mu_);
      sleeping_ = false;
    }
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == event_fd_) {
        uint64_t v;
        ssize_t unused = read(event_fd_, &v, sizeof(v));
        (void)unused;
      }
    }
    last_active = absl::Now();
  }
}

PeerId UcxTransport::PeerForEp(ucp_ep_h ep) {
  auto it = peer_by_ep_.find(ep);
  if (it != peer_by_ep_.end()) return it->second;
  PeerId id = peers_.size();
  peers_.push_back(Peer{ep, false, false});
  peer_by_ep_[ep] = id;
  return id;
}

void UcxTransport::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  auto it = self->peer_by_ep_.find(ep);
  if (it != self->peer_by_ep_.end()) self->peers_[it->second].failed = true;
}

absl::StatusOr<PeerId> UcxTransport::Connect(absl::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("empty UCX address");
  std::string addr(address);
  absl::StatusOr<PeerId> result = absl::UnavailableError("transport is shut down");
  absl::Notification done;
  const bool posted = Post([&] {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(addr.data());
    ep.err_mode =
        options_.peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    if (options_.peer_error_handling) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_handler.cb = &UcxTransport::OnEpError;
      ep.err_handler.arg = this;
    }
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
      peers_.push_back(Peer{h, false, true});
      peer_by_ep_[h] = id;
      result = id;
    }
    done.Notify();
  });
  if (!posted) return absl::UnavailableError("transport is shut down");
  done.WaitForNotification();
  return result;
}

void UcxTransport::Send(PeerId to, absl::Span<const uint8_t> header, const void* payload,
                        size_t payload_bytes, SendDone done) {
  MessageSent();
  std::vector<uint8_t> h(header.begin(), header.end());
  auto shared_done = std::make_shared<SendDone>(std::move(done));
  const bool posted = Post([this, to, h = std::move(h), payload, payload_bytes, shared_done] {
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
  auto* op = new SendOp(std::move(header), std::move(done));
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.send = &SendComplete;
  rp.user_data = op;
  rp.flags = UCP_AM_SEND_FLAG_REPLY;
  ucs_status_ptr_t r = ucp_am_send_nbx(peers_[to].ep, kAmId, op->header.data(), op->header.size(),
                                       payload, bytes, &rp);
  if (r == nullptr) {
    if (op->done) op->done(absl::OkStatus());
    delete op;
  } else if (UCS_PTR_IS_ERR(r)) {
    if (op->done) op->done(UcsError("ucp_am_send_nbx", UCS_PTR_STATUS(r)));
    delete op;
  } else {
    op->in_flight = &in_flight_;
    in_flight_.insert(op);
  }
}

ucs_status_t UcxTransport::OnAm(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  Incoming in;
  in.from = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? self->PeerForEp(param->reply_ep)
                                                                 : ~PeerId{0};
  in.header = absl::MakeConstSpan(static_cast<const uint8_t*>(header), header_length);
  in.payload_bytes = length;
  Accept accept = self->handler_ ? self->handler_(in) : Accept{};
  if (length == 0) {
    if (accept.done) accept.done(absl::OkStatus());
    return UCS_OK;
  }
  if (accept.dst == nullptr) return UCS_OK;  // refused: UCX releases the data
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    std::memcpy(accept.dst, data, length);
    if (accept.done) accept.done(absl::OkStatus());
    return UCS_OK;
  }
  auto* op = new RecvOp(std::move(accept.done));
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.recv_am = &RecvComplete;
  rp.user_data = op;
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(self->worker_, data, accept.dst, length, &rp);
  if (r == nullptr) {
    if (op->done) op->done(absl::OkStatus());
    delete op;
  } else if (UCS_PTR_IS_ERR(r)) {
    if (op->done) op->done(UcsError("ucp_am_recv_data_nbx", UCS_PTR_STATUS(r)));
    delete op;
  } else {
    op->in_flight = &self->in_flight_;
    self->in_flight_.insert(op);
  }
  return UCS_OK;
}

void UcxTransport::Shutdown() {
  if (shut_down_.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  ssize_t unused = write(event_fd_, &one, sizeof(one));
  (void)unused;
  if (thread_.joinable()) thread_.join();
  // The progress thread is gone: this thread now owns the workers.
  DestroyWorker(absl::CancelledError("UCX transport shut down"));
  if (probe_worker_ != nullptr) ucp_worker_destroy(probe_worker_);
  probe_worker_ = nullptr;
  if (context_ != nullptr) ucp_cleanup(context_);
  worker_ = nullptr;
  context_ = nullptr;
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

}  // namespace tessel
