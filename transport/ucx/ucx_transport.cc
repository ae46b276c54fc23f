#include "transport/ucx/ucx_transport.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/statvfs.h>
#include <ucs/memory/memory_type.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace tessel {
namespace ucx_internal {

EpLanes ParseEpInfo(absl::string_view info) {
  EpLanes lanes;
  auto add = [](std::vector<std::string>* to, const std::string& tl) {
    if (std::find(to->begin(), to->end(), tl) == to->end()) to->push_back(tl);
  };
  for (absl::string_view line : absl::StrSplit(info, '\n')) {
    // "#   lane[1]:  3:cma/memory.0 md[2]   -> md[2]/cma/sysdev[255] rma_bw#0"
    std::vector<absl::string_view> tok = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t at = 0;
    while (at < tok.size() && !absl::StartsWith(tok[at], "lane[")) ++at;
    if (at + 2 >= tok.size()) continue;
    absl::string_view resource = tok[at + 1];  // "3:cma/memory.0"
    const size_t colon = resource.find(':');
    const size_t slash = resource.find('/');
    if (colon == absl::string_view::npos || slash == absl::string_view::npos || slash < colon) {
      continue;
    }
    const std::string tl(resource.substr(colon + 1, slash - colon - 1));
    if (tl == "posix" || tl == "sysv" || tl == "xpmem") lanes.mappable = true;
    size_t arrow = at + 2;
    while (arrow < tok.size() && tok[arrow] != "->") ++arrow;
    for (size_t k = arrow + 2; k < tok.size(); ++k) {  // after "-> md[2]/cma/sysdev[255]"
      if (tok[k] == "am") add(&lanes.am, tl);
      if (absl::StartsWith(tok[k], "rma_bw")) add(&lanes.rma, tl);
    }
  }
  return lanes;
}

std::string DescribeCopied(const EpLanes& lanes) {
  if (!lanes.rma.empty()) {
    return absl::StrCat("copied (rendezvous by RMA over ", absl::StrJoin(lanes.rma, "+"), ")");
  }
  if (!lanes.am.empty()) {
    return absl::StrCat("copied (active messages over ", absl::StrJoin(lanes.am, "+"), ")");
  }
  return "copied";
}

namespace {
// The lanes UCX chose for `ep` (ucp_ep_print_info, the one public view of
// them in UCX 1.13).
EpLanes LanesOf(ucp_ep_h ep) {
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
}  // namespace

// An operation UCX holds until its callback: listed in the transport's
// in_flight_ meanwhile, so Shutdown can cancel what never completes.
struct PendingOp {
  explicit PendingOp(std::function<void(absl::Status)> d) : done(std::move(d)) {}
  virtual ~PendingOp() = default;
  std::function<void(absl::Status)> done;
  absl::flat_hash_set<PendingOp*>* in_flight = nullptr;
};

struct Context {
  ucp_context_h h = nullptr;
  ~Context() {
    if (h != nullptr) ucp_cleanup(h);
  }
};

// Destroying it destroys the rkey (and unmaps what ucp_rkey_ptr mapped):
// before its worker goes.
struct RemoteKey {
  ~RemoteKey() {
    if (rkey != nullptr) ucp_rkey_destroy(rkey);
  }
  ucp_rkey_h rkey = nullptr;
  ucp_ep_h ep = nullptr;  // unpacked on it (it keys the cache)
  ucp_worker_h worker = nullptr;
  uint64_t region = 0;
  uint64_t remote_base = 0;
  char* mapped = nullptr;  // where remote_base is mapped here; null: not mappable
  int borrows = 0;         // borrowed payloads
  absl::Time used_at;      // last descriptor (least recently used goes first)
  bool retired = false;    // out of the cache: its worker was reset
};

// ucp_mem_map(ALLOCATE) regions, found by address when a payload is sent.
class Memory : public PayloadMemory {
 public:
  struct Region {
    size_t bytes = 0;
    ucp_mem_h memh = nullptr;
    uint64_t id = 0;
    std::shared_ptr<const std::string> rkey;  // packed
  };
  struct Found {
    uint64_t id;
    uintptr_t base;
    std::shared_ptr<const std::string> rkey;
  };

  explicit Memory(std::shared_ptr<Context> context) : context_(std::move(context)) {}
  ~Memory() override {
    for (auto& [base, r] : regions_) ucp_mem_unmap(context_->h, r.memh);
  }

  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // UCX may back this with a file in /dev/shm, sized sparsely: past the
    // filesystem's free space, touching the pages would raise SIGBUS (a
    // container's /dev/shm is often 64 MiB). Ordinary memory instead.
    struct statvfs fs {};
    if (statvfs("/dev/shm", &fs) == 0 &&
        static_cast<double>(fs.f_bavail) * fs.f_frsize < 1.25 * static_cast<double>(bytes)) {
      return nullptr;
    }
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = nullptr;
    mp.length = bytes;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_h memh = nullptr;
    if (ucp_mem_map(context_->h, &mp, &memh) != UCS_OK) return nullptr;
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    void* packed = nullptr;
    size_t packed_len = 0;
    if (ucp_mem_query(memh, &attr) != UCS_OK || attr.length < bytes ||
        ucp_rkey_pack(context_->h, memh, &packed, &packed_len) != UCS_OK) {
      ucp_mem_unmap(context_->h, memh);
      return nullptr;
    }
    Region r;
    r.bytes = bytes;
    r.memh = memh;
    r.rkey = std::make_shared<const std::string>(static_cast<const char*>(packed), packed_len);
    ucp_rkey_buffer_release(packed);
    std::memset(attr.address, 0, bytes);  // some allocation methods (heap) do not zero
    absl::MutexLock lock(&mu_);
    r.id = next_id_++;
    regions_[reinterpret_cast<uintptr_t>(attr.address)] = std::move(r);
    return attr.address;
  }

  bool Free(void* p) override {
    ucp_mem_h memh = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
      if (it == regions_.end()) return false;
      memh = it->second.memh;
      regions_.erase(it);
    }
    ucp_mem_unmap(context_->h, memh);
    return true;
  }

  std::optional<Found> Find(const void* p, size_t bytes) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    absl::MutexLock lock(&mu_);
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin()) return std::nullopt;
    --it;
    if (at + bytes > it->first + it->second.bytes) return std::nullopt;
    return Found{it->second.id, it->first, it->second.rkey};
  }

 private:
  const std::shared_ptr<Context> context_;
  absl::Mutex mu_;
  std::map<uintptr_t, Region> regions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
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
constexpr unsigned kProbeAmId = 8;       // CheckReceiveQueue's probes
constexpr unsigned kDescriptorAmId = 9;  // a payload in payload memory
constexpr unsigned kReleaseAmId = 10;    // the receiver is done with it

// A descriptor's fixed part; the message header follows, then the rkey.
struct DescriptorHead {
  uint64_t lease;
  uint64_t region;
  uint64_t remote_base;
  uint64_t offset;
  uint64_t bytes;
  uint32_t header_len;
  uint32_t rkey_len;
};

// RELEASE outcomes, which also tell the sender the path its payload took.
enum ReleaseStatus : uint8_t { kReadInPlace = 0, kResend = 1, kDropped = 2 };
struct ReleaseMessage {
  uint64_t lease;
  uint8_t status;
};

// Remote regions kept unpacked per sender endpoint (least recently used
// evicted beyond this).
constexpr int kKeysPerEndpoint = 16;
// Remote regions not used for this long are unmapped.
constexpr absl::Duration kKeyIdle = absl::Seconds(30);

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

// Sends `op` (its header, and `payload`) as active message `id` asking for a
// reply endpoint; `op->done` gets the outcome, now or on completion.
void StartAm(ucp_ep_h ep, unsigned id, SendOp* op, const void* payload, size_t bytes,
             absl::flat_hash_set<PendingOp*>* in_flight) {
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.send = &SendComplete;
  rp.user_data = op;
  rp.flags = UCP_AM_SEND_FLAG_REPLY;
  ucs_status_ptr_t r =
      ucp_am_send_nbx(ep, id, op->header.data(), op->header.size(), payload, bytes, &rp);
  if (r == nullptr) {
    if (op->done) op->done(absl::OkStatus());
    delete op;
  } else if (UCS_PTR_IS_ERR(r)) {
    if (op->done) op->done(UcsError("ucp_am_send_nbx", UCS_PTR_STATUS(r)));
    delete op;
  } else {
    op->in_flight = in_flight;
    in_flight->insert(op);
  }
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
  if (const char* min = std::getenv("TESSEL_UCX_IN_PLACE_MIN_BYTES")) {
    options.in_place_min_bytes = static_cast<size_t>(std::atoll(min));
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
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  // RMA: payload memory is registered for peers (packed rkeys, mapped with
  // ucp_rkey_ptr). Shared: it is mapped and unmapped from any thread while
  // the progress thread runs the workers.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
  params.mt_workers_shared = 1;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcsError("ucp_init (is libucx installed and UCX_TLS valid?)", s);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK) {
    for (int t = 0; t < UCS_MEMORY_TYPE_LAST; ++t) {
      if (t != UCS_MEMORY_TYPE_HOST && (attr.memory_types & UCS_BIT(t)) != 0) {
        device_memory_types_.push_back(ucs_memory_type_names[t]);
      }
    }
  }
  context_holder_ = std::make_shared<ucx_internal::Context>();
  context_holder_->h = context_;
  memory_ = std::make_shared<ucx_internal::Memory>(context_holder_);

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

  for (const auto& [id, cb] :
       {std::pair<unsigned, ucp_am_recv_callback_t>{kAmId, &OnAm},
        std::pair<unsigned, ucp_am_recv_callback_t>{kProbeAmId, &OnProbe},
        std::pair<unsigned, ucp_am_recv_callback_t>{kDescriptorAmId, &OnDescriptor},
        std::pair<unsigned, ucp_am_recv_callback_t>{kReleaseAmId, &OnRelease}}) {
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
  // Descriptor sends will never be released through this worker.
  std::vector<Lease> unreleased;
  for (auto& [id, lease] : leases_) unreleased.push_back(std::move(lease));
  leases_.clear();
  // Remote keys go before their worker; a borrowed one stays (retired), and
  // so does the worker, until the borrow ends.
  int kept = 0;
  for (auto& [where, key] : remote_keys_) {
    if (key->borrows > 0) {
      key->retired = true;
      ++kept;
    } else {
      delete key;
    }
  }
  remote_keys_.clear();
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
    if (kept > 0) {
      retired_workers_[worker_] = kept;
    } else {
      ucp_worker_destroy(worker_);
    }
    worker_ = nullptr;
    ucp_fd_ = -1;
  }
  for (Lease& lease : unreleased) {
    if (lease.done) lease.done(why);
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
  return p;
}

PeerId UcxTransport::PeerForEp(ucp_ep_h ep) {
  auto it = peer_by_ep_.find(ep);
  if (it != peer_by_ep_.end()) return it->second;
  PeerId id = peers_.size();
  peers_.push_back(NewPeer(ep, /*owned=*/false));
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
      peers_.push_back(NewPeer(h, /*owned=*/true));
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
  if (options_.zero_copy && bytes >= options_.in_place_min_bytes && peers_[to].in_place &&
      SendDescriptor(to, header, payload, bytes, done)) {
    return;
  }
  StartAm(peers_[to].ep, kAmId, new SendOp(std::move(header), std::move(done)), payload, bytes,
          &in_flight_);
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

std::shared_ptr<PayloadMemory> UcxTransport::payload_memory() { return memory_; }

bool UcxTransport::SendDescriptor(PeerId to, std::vector<uint8_t>& header, const void* payload,
                                  size_t bytes, SendDone& done) {
  std::optional<ucx_internal::Memory::Found> region = memory_->Find(payload, bytes);
  if (!region.has_value()) return false;
  const uint64_t lease = next_lease_++;
  DescriptorHead head{};
  head.lease = lease;
  head.region = region->id;
  head.remote_base = region->base;
  head.offset = reinterpret_cast<uintptr_t>(payload) - region->base;
  head.bytes = bytes;
  head.header_len = static_cast<uint32_t>(header.size());
  head.rkey_len = static_cast<uint32_t>(region->rkey->size());
  std::vector<uint8_t> descriptor(sizeof(head) + header.size() + region->rkey->size());
  std::memcpy(descriptor.data(), &head, sizeof(head));
  if (!header.empty()) std::memcpy(descriptor.data() + sizeof(head), header.data(), header.size());
  std::memcpy(descriptor.data() + sizeof(head) + header.size(), region->rkey->data(),
              region->rkey->size());
  leases_[lease] = Lease{to, std::move(done), header, payload, bytes};
  // The descriptor's own send only matters if it fails: then the lease ends.
  auto* op = new SendOp(std::move(descriptor), [this, lease](absl::Status s) {
    if (s.ok()) return;
    auto it = leases_.find(lease);
    if (it == leases_.end()) return;
    SendDone d = std::move(it->second.done);
    leases_.erase(it);
    if (d) d(s);
  });
  StartAm(peers_[to].ep, kDescriptorAmId, op, nullptr, 0, &in_flight_);
  return true;
}

void UcxTransport::SendRelease(PeerId to, uint64_t lease, uint8_t status) {
  if (to >= peers_.size() || peers_[to].failed || peers_[to].ep == nullptr) return;
  auto* message = new ReleaseMessage{lease, status};
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = [](void* request, ucs_status_t, void* user_data) {
    delete static_cast<ReleaseMessage*>(user_data);
    ucp_request_free(request);
  };
  rp.user_data = message;
  ucs_status_ptr_t r =
      ucp_am_send_nbx(peers_[to].ep, kReleaseAmId, message, sizeof(*message), nullptr, 0, &rp);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete message;
}

absl::StatusOr<ucx_internal::RemoteKey*> UcxTransport::RemoteKeyFor(
    ucp_ep_h ep, uint64_t region, absl::Span<const uint8_t> packed, uint64_t remote_base) {
  const absl::Time now = absl::Now();
  auto it = remote_keys_.find({ep, region});
  if (it != remote_keys_.end()) it->second->used_at = now;
  // A peer that went away (a worker restarted, a job ended) never sends
  // again: its mappings would hold its memory for as long as this process
  // lives. Keys idle for kKeyIdle go (checked at most once a second).
  if (now - last_key_sweep_ > absl::Seconds(1)) {
    last_key_sweep_ = now;
    for (auto k = remote_keys_.begin(); k != remote_keys_.end();) {
      ucx_internal::RemoteKey* key = k->second;
      if (key->borrows == 0 && now - key->used_at > kKeyIdle) {
        delete key;
        remote_keys_.erase(k++);
      } else {
        ++k;
      }
    }
  }
  if (it != remote_keys_.end()) return it->second;  // used just now: not swept
  ucp_rkey_h rkey = nullptr;
  ucs_status_t s = ucp_ep_rkey_unpack(ep, packed.data(), &rkey);
  if (s != UCS_OK) return UcsError("ucp_ep_rkey_unpack", s);
  auto* key = new ucx_internal::RemoteKey;
  key->rkey = rkey;
  key->ep = ep;
  key->worker = worker_;
  key->region = region;
  key->remote_base = remote_base;
  key->used_at = now;
  void* local = nullptr;
  if (ucp_rkey_ptr(rkey, remote_base, &local) == UCS_OK) key->mapped = static_cast<char*>(local);
  // Keep a bounded number per endpoint: a sender that frees and allocates
  // payload memory (job after job) leaves stale regions behind.
  int same_ep = 0;
  ucx_internal::RemoteKey* oldest = nullptr;
  for (auto& [where, k] : remote_keys_) {
    if (where.first != ep) continue;
    ++same_ep;
    if (k->borrows == 0 && (oldest == nullptr || k->used_at < oldest->used_at)) oldest = k;
  }
  if (same_ep >= kKeysPerEndpoint && oldest != nullptr) {
    remote_keys_.erase({oldest->ep, oldest->region});
    delete oldest;
  }
  remote_keys_[{ep, region}] = key;
  return key;
}

void UcxTransport::EndBorrow(ucx_internal::RemoteKey* key) {
  if (--key->borrows > 0 || !key->retired) return;
  ucp_worker_h w = key->worker;
  delete key;
  auto it = retired_workers_.find(w);
  if (it != retired_workers_.end() && --it->second == 0) {
    ucp_worker_destroy(w);
    retired_workers_.erase(it);
  }
}

ucs_status_t UcxTransport::OnDescriptor(void* arg, const void* header, size_t header_length, void*,
                                        size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  DescriptorHead head{};
  if (header_length < sizeof(head)) {
    std::fprintf(stderr, "tessel ucx: dropping a malformed payload descriptor (%zu bytes)\n",
                 header_length);
    return UCS_OK;
  }
  std::memcpy(&head, header, sizeof(head));
  if (header_length != sizeof(head) + head.header_len + static_cast<size_t>(head.rkey_len) ||
      !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
    std::fprintf(stderr, "tessel ucx: dropping a malformed payload descriptor\n");
    return UCS_OK;
  }
  const auto* bytes = static_cast<const uint8_t*>(header);
  ucp_ep_h ep = param->reply_ep;
  const PeerId from = self->PeerForEp(ep);
  absl::StatusOr<ucx_internal::RemoteKey*> key = self->RemoteKeyFor(
      ep, head.region, absl::MakeConstSpan(bytes + sizeof(head) + head.header_len, head.rkey_len),
      head.remote_base);
  if (!key.ok() || (*key)->mapped == nullptr) {
    // Not unpackable (e.g. another pod's shared memory) or not mappable here
    // (another host, no shared-memory transport in common): the sender
    // sends it again through the queues, and sends everything to this
    // endpoint that way from now on. (UCX 1.13 cannot start an RMA get on a
    // reply endpoint, so no get instead.)
    if (!key.ok()) {
      std::fprintf(stderr,
                   "tessel ucx: cannot reach a peer's payload memory (%s); it sends through the "
                   "queues instead\n",
                   std::string(key.status().message()).c_str());
    }
    self->SendRelease(from, head.lease, kResend);
    return UCS_OK;
  }
  Incoming in;
  in.from = from;
  in.header = absl::MakeConstSpan(bytes + sizeof(head), head.header_len);
  in.payload_bytes = head.bytes;
  in.in_place = (*key)->mapped + head.offset;
  in.lease = head.lease;
  Accept accept = self->handler_ ? self->handler_(in) : Accept{};
  if (accept.borrow) {
    ++(*key)->borrows;
    self->borrowed_[{from, head.lease}] = *key;
    self->peers_[from].path = "in place";
    return UCS_OK;
  }
  if (accept.dst == nullptr || head.bytes == 0) {
    if (accept.dst != nullptr && accept.done) accept.done(absl::OkStatus());
    self->SendRelease(from, head.lease, kDropped);
    return UCS_OK;
  }
  std::memcpy(accept.dst, in.in_place, head.bytes);
  self->peers_[from].path = "in place";
  if (accept.done) accept.done(absl::OkStatus());
  self->SendRelease(from, head.lease, kReadInPlace);
  return UCS_OK;
}

ucs_status_t UcxTransport::OnRelease(void* arg, const void* header, size_t header_length, void*,
                                     size_t, const ucp_am_recv_param_t*) {
  auto* self = static_cast<UcxTransport*>(arg);
  MessageDelivered();
  ReleaseMessage m{};
  if (header_length != sizeof(m)) return UCS_OK;
  std::memcpy(&m, header, sizeof(m));
  auto it = self->leases_.find(m.lease);
  if (it == self->leases_.end()) return UCS_OK;
  Lease lease = std::move(it->second);
  self->leases_.erase(it);
  if (m.status == kResend && lease.peer < self->peers_.size()) {
    self->peers_[lease.peer].in_place = false;
    self->peers_[lease.peer].path = self->peers_[lease.peer].copied;
    self->DoSend(lease.peer, std::move(lease.header), lease.payload, lease.bytes,
                 std::move(lease.done));
    return UCS_OK;
  }
  if (m.status == kReadInPlace && lease.peer < self->peers_.size()) {
    self->peers_[lease.peer].path = "in place";
  }
  if (lease.done) lease.done(absl::OkStatus());
  return UCS_OK;
}

void UcxTransport::Release(PeerId from, uint64_t lease) {
  Post([this, from, lease] {
    auto it = borrowed_.find({from, lease});
    if (it == borrowed_.end()) return;
    ucx_internal::RemoteKey* key = it->second;
    borrowed_.erase(it);
    if (!key->retired) SendRelease(from, lease, kReadInPlace);
    EndBorrow(key);
  });
}

std::string UcxTransport::PayloadPath(PeerId peer) {
  std::string path = "copied";
  absl::Notification done;
  if (!Post([&] {
        if (peer < peers_.size()) path = peers_[peer].path;
        done.Notify();
      })) {
    return path;
  }
  done.WaitForNotification();
  return path;
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
  // Borrows end here (their readers must have stopped): keys, then workers.
  for (auto& [where, key] : borrowed_) {
    if (--key->borrows == 0) delete key;
  }
  borrowed_.clear();
  for (auto& [w, n] : retired_workers_) ucp_worker_destroy(w);
  retired_workers_.clear();
  if (probe_worker_ != nullptr) ucp_worker_destroy(probe_worker_);
  probe_worker_ = nullptr;
  // The context goes with the last of this transport and its payload
  // memory (memory must be unmapped before ucp_cleanup).
  context_holder_.reset();
  worker_ = nullptr;
  context_ = nullptr;
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

}  // namespace tessel
