#include "tests/attack_transport.h"

#include <ucp/api/ucp.h>

#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/ucx/internal/am_ids.h"
#include "transport/ucx/internal/descriptor_codec.h"

namespace tessel {
namespace {

namespace ui = ucx_internal;

constexpr size_t kRegion = 64 << 10;  // the attacker's mapped region
constexpr int kDescriptors = 100;     // of each shape, per peer
constexpr int kReleases = 1000;       // per peer
// Endpoints sending HELLOs: more than the peer ever dials for HELLOs
// (UcxTransport::kMaxSpareEndpoints, 64).
constexpr int kHelloEndpoints = 80;
constexpr int kHelloRepeats = 3;  // each endpoint says HELLO this often

absl::Status UcsError(const char* what, ucs_status_t s) {
  return absl::UnavailableError(absl::StrCat(what, ": ", ucs_status_string(s)));
}

// A raw UCP worker with one mapped region, progressed by this thread.
class RawUcp {
 public:
  ~RawUcp() {
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    for (ucp_ep_h ep : eps_) Wait(ucp_ep_close_nbx(ep, &cp)).IgnoreError();  // best effort
    if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  absl::Status Init(const std::string& tls) {
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return UcsError("ucp_config_read", s);
    if (!tls.empty()) ucp_config_modify(config, "TLS", tls.c_str());
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    s = ucp_init(&p, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return UcsError("ucp_init", s);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if ((s = ucp_worker_create(context_, &wp, &worker_)) != UCS_OK) {
      return UcsError("ucp_worker_create", s);
    }
    // The peer answers (RELEASEs of descriptors, frames): taken and ignored
    // (UCX 1.13 crashes on an active message with no handler).
    for (unsigned id :
         {ui::kAmId, ui::kProbeAmId, ui::kDescriptorAmId, ui::kReleaseAmId, ui::kHelloAmId}) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
      hp.id = id;
      hp.cb = [](void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
        return UCS_OK;
      };
      if ((s = ucp_worker_set_am_recv_handler(worker_, &hp)) != UCS_OK) {
        return UcsError("ucp_worker_set_am_recv_handler", s);
      }
    }
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = kRegion;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    if ((s = ucp_mem_map(context_, &mp, &memh_)) != UCS_OK) return UcsError("ucp_mem_map", s);
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    if ((s = ucp_mem_query(memh_, &attr)) != UCS_OK) return UcsError("ucp_mem_query", s);
    base_ = reinterpret_cast<uint64_t>(attr.address);
    std::memset(attr.address, 0x7F, kRegion);
    void* packed = nullptr;
    size_t len = 0;
    if ((s = ucp_rkey_pack(context_, memh_, &packed, &len)) != UCS_OK) {
      return UcsError("ucp_rkey_pack", s);
    }
    rkey_.assign(static_cast<uint8_t*>(packed), static_cast<uint8_t*>(packed) + len);
    ucp_rkey_buffer_release(packed);
    ucp_address_t* addr = nullptr;
    if ((s = ucp_worker_get_address(worker_, &addr, &len)) != UCS_OK) {
      return UcsError("ucp_worker_get_address", s);
    }
    address_.assign(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    return absl::OkStatus();
  }

  // A new endpoint to `address` (each one a new endpoint at the peer).
  absl::StatusOr<ucp_ep_h> Connect(const std::string& address) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ucp_ep_h h = nullptr;
    if (ucs_status_t s = ucp_ep_create(worker_, &ep, &h); s != UCS_OK) {
      return UcsError("ucp_ep_create", s);
    }
    eps_.push_back(h);
    return h;
  }

  // Active message `id` with `header` and `bytes` of `data`, carrying a
  // reply endpoint as the transport's own sends do; waits until it left.
  absl::Status Send(ucp_ep_h ep, unsigned id, const std::vector<uint8_t>& header,
                    const void* data = nullptr, size_t bytes = 0) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, header.data(), header.size(), data, bytes, &rp);
    if (UCS_PTR_IS_ERR(r)) return UcsError("ucp_am_send_nbx", UCS_PTR_STATUS(r));
    return Wait(r);
  }

  // Progresses for `d` (the peer's answers and wire-up).
  void Progress(absl::Duration d) {
    for (const absl::Time end = absl::Now() + d; absl::Now() < end;) ucp_worker_progress(worker_);
  }

  ui::DescriptorFields Fields(uint64_t lease, uint64_t region_bytes, uint64_t offset) const {
    ui::DescriptorFields f;
    f.lease = lease;
    f.region = 1;
    f.remote_base = base_;
    f.region_bytes = region_bytes;
    f.offset = offset;
    f.bytes = 4096;
    return f;
  }
  const std::vector<uint8_t>& rkey() const { return rkey_; }
  const std::string& address() const { return address_; }

 private:
  absl::Status Wait(ucs_status_ptr_t r) {
    if (r == nullptr) return absl::OkStatus();
    if (UCS_PTR_IS_ERR(r)) return UcsError("request", UCS_PTR_STATUS(r));
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    ucs_status_t s = UCS_INPROGRESS;
    while ((s = ucp_request_check_status(r)) == UCS_INPROGRESS && absl::Now() < deadline) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(r);
    return s == UCS_OK ? absl::OkStatus() : UcsError("send", s);
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  uint64_t base_ = 0;
  std::vector<uint8_t> rkey_;
  std::string address_;
  std::vector<ucp_ep_h> eps_;
};

}  // namespace

bool IsTransportKind(const std::string& kind) {
  return kind == "out_of_region" || kind == "forged_release" || kind == "hello_flood";
}

absl::Status AttackTransport(const std::string& to, const std::string& tls,
                             const std::set<std::string>& kinds, const std::string& header,
                             const std::string& third_party, std::map<std::string, int64_t>* sent) {
  RawUcp ucp;
  if (absl::Status s = ucp.Init(tls); !s.ok()) return s;
  std::mt19937_64 rng(std::random_device{}());
  const std::vector<uint8_t> frame(header.begin(), header.end());
  if (kinds.count("out_of_region") || kinds.count("forged_release")) {
    absl::StatusOr<ucp_ep_h> ep = ucp.Connect(to);
    if (!ep.ok()) return ep.status();
    if (kinds.count("out_of_region")) {
      for (int i = 0; i < kDescriptors; ++i) {
        // 4 KiB at 1 MiB of a 64 KiB region; then the region said 1 GiB.
        for (uint64_t region : {uint64_t{kRegion}, uint64_t{1} << 30}) {
          const std::vector<uint8_t> d =
              ui::EncodeDescriptor(ucp.Fields(rng(), region, 1 << 20), frame, ucp.rkey());
          if (absl::Status s = ucp.Send(*ep, ui::kDescriptorAmId, d); !s.ok()) return s;
          ++(*sent)["out_of_region"];
        }
      }
    }
    if (kinds.count("forged_release")) {
      // Half from an endpoint that sent the peer nothing else (no peer of
      // its: refused and logged), half from the one above (a peer: a lease
      // it never lent it reads as a late duplicate, ignored silently).
      absl::StatusOr<ucp_ep_h> stranger = ucp.Connect(to);
      if (!stranger.ok()) return stranger.status();
      for (int i = 0; i < kReleases; ++i) {
        const std::vector<uint8_t> r = ui::EncodeRelease({rng(), ui::ReleaseStatus::kReadInPlace});
        if (absl::Status s = ucp.Send(i < kReleases / 2 ? *stranger : *ep, ui::kReleaseAmId, r);
            !s.ok()) {
          return s;
        }
        ++(*sent)["forged_release"];
      }
    }
  }
  if (kinds.count("hello_flood")) {
    for (int i = 0; i < kHelloEndpoints; ++i) {
      absl::StatusOr<ucp_ep_h> ep = ucp.Connect(to);
      if (!ep.ok()) return ep.status();
      const std::string& dial = (i % 2 == 0 && !third_party.empty()) ? third_party : ucp.address();
      for (int k = 0; k < kHelloRepeats; ++k) {
        if (absl::Status s = ucp.Send(*ep, ui::kHelloAmId, {}, dial.data(), dial.size()); !s.ok()) {
          return s;
        }
        ++(*sent)["hello_flood"];
      }
    }
  }
  ucp.Progress(absl::Milliseconds(200));
  return absl::OkStatus();
}

}  // namespace tessel
