// Issue 42: what a UCX transport does with zero-copy messages a hostile
// process writes by hand (a raw UCP worker here, as any process on the host
// could run): a DESCRIPTOR naming bytes outside the region it describes, or
// re-describing a region as larger, is dropped before anything is read or
// any handler runs; a RELEASE from an endpoint the lease was not sent to
// ends nothing, so the real receiver still reads the payload in place.
#include <ucp/api/ucp.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "transport/transport_testing.h"
#include "transport/ucx/internal/am_ids.h"
#include "transport/ucx/internal/descriptor_codec.h"
#include "transport/ucx/internal/ucp_testing.h"

namespace tessel {
namespace {

using ucx_internal::DescriptorFields;

constexpr char kTls[] = "posix,sysv,self";
constexpr size_t kRegion = 64 << 10;

// A process that speaks raw UCP: one worker, one mapped region, one endpoint.
class Forger {
 public:
  explicit Forger(const std::string& to) {
    context_ = ucx_internal::TestContext(kTls);
    worker_ = ucx_internal::TestWorker(context_->get());
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = kRegion;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    EXPECT_EQ(ucp_mem_map(context_->get(), &mp, &memh_), UCS_OK);
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    EXPECT_EQ(ucp_mem_query(memh_, &attr), UCS_OK);
    base_ = reinterpret_cast<uint64_t>(attr.address);
    std::memset(attr.address, 0x5a, kRegion);
    void* packed = nullptr;
    size_t len = 0;
    EXPECT_EQ(ucp_rkey_pack(context_->get(), memh_, &packed, &len), UCS_OK);
    rkey_.assign(static_cast<uint8_t*>(packed), static_cast<uint8_t*>(packed) + len);
    ucp_rkey_buffer_release(packed);
    // The receiver answers descriptors with RELEASEs (UCX 1.13 crashes on an
    // active message with no handler): taken and ignored.
    for (unsigned id : {ucx_internal::kAmId, ucx_internal::kReleaseAmId}) {
      ucp_am_handler_param_t hp{};
      hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
      hp.id = id;
      hp.cb = [](void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) {
        return UCS_OK;
      };
      EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_, &hp), UCS_OK);
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(to.data());
    EXPECT_EQ(ucp_ep_create(worker_, &ep, &ep_), UCS_OK);
  }
  ~Forger() {
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    Wait(ucp_ep_close_nbx(ep_, &cp));
    ucp_mem_unmap(context_->get(), memh_);
    ucp_worker_destroy(worker_);
  }

  DescriptorFields Fields(uint64_t offset, uint64_t bytes) const {
    DescriptorFields f;
    f.lease = 77;
    f.region = 1;
    f.remote_base = base_;
    f.region_bytes = kRegion;
    f.offset = offset;
    f.bytes = bytes;
    return f;
  }
  // Sends active message `id` with `header` (and a reply endpoint, as the
  // transport's own sends carry) and waits until it left.
  void Send(unsigned id, const std::vector<uint8_t>& header) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_REPLY;
    Wait(ucp_am_send_nbx(ep_, id, header.data(), header.size(), nullptr, 0, &rp));
  }
  void SendDescriptor(const DescriptorFields& f) {
    const std::vector<uint8_t> frame(64, 1);  // the user's header: opaque here
    Send(ucx_internal::kDescriptorAmId,
         ucx_internal::EncodeDescriptor(f, frame, absl::MakeConstSpan(rkey_)));
  }

 private:
  void Wait(ucs_status_ptr_t r) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && absl::Now() < deadline) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(r);
    }
    // Let the receiver's answers (a RELEASE, wireup) be taken too.
    for (absl::Time until = absl::Now() + absl::Milliseconds(50); absl::Now() < until;) {
      ucp_worker_progress(worker_);
    }
  }

  std::shared_ptr<ucx_internal::UcxContext> context_;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  uint64_t base_ = 0;
  std::vector<uint8_t> rkey_;
};

// Waits up to 10 s for `cond`.
bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 1000; ++i) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

TEST(UcxHostileTest, ADescriptorOutsideItsRegionIsDroppedBeforeAnythingIsRead) {
  auto receiver = MakeUcxTransport({.tls = kTls});
  std::atomic<int> offered{0};
  std::vector<uint8_t> dst(1 << 20, 0);
  receiver->SetHandler([&](const Incoming& in) {
    ++offered;
    return Accept{dst.data(), dst.size(), nullptr};
  });
  Forger forger(receiver->address());
  // 4 KiB at 1 MiB of a 64 KiB region: before the check, the receiver read
  // (and copied into dst) whatever lay 1 MiB past the mapping.
  forger.SendDescriptor(forger.Fields(1 << 20, 4096));
  ASSERT_TRUE(Eventually([&] { return receiver->refusals().descriptors == 1; }));
  EXPECT_EQ(offered.load(), 0);
  // A real descriptor of the region is read; one re-describing the same
  // region as 1 GiB (so the offset would pass) is dropped.
  forger.SendDescriptor(forger.Fields(0, 4096));
  ASSERT_TRUE(Eventually([&] { return offered.load() == 1; }));
  EXPECT_EQ(dst[0], 0x5a);
  DescriptorFields stretched = forger.Fields(1 << 20, 4096);
  stretched.region_bytes = uint64_t{1} << 30;
  forger.SendDescriptor(stretched);
  ASSERT_TRUE(Eventually([&] { return receiver->refusals().descriptors == 2; }));
  EXPECT_EQ(offered.load(), 1);
  receiver->Shutdown();
}

TEST(UcxHostileTest, AReleaseFromAnotherEndpointEndsNoSend) {
  auto sender = MakeUcxTransport({.tls = kTls});
  auto receiver = MakeUcxTransport({.tls = kTls});
  absl::Mutex mu;
  PeerId from = 0;
  uint64_t lease = 0;
  std::atomic<bool> borrowed{false};
  receiver->SetHandler([&](const Incoming& in) {
    Accept a;
    if (in.in_place == nullptr) return a;
    absl::MutexLock lock(&mu);
    from = in.from;
    lease = in.lease;
    borrowed = true;
    a.borrow = true;
    return a;
  });
  std::shared_ptr<PayloadMemory> memory = sender->payload_memory();
  const size_t bytes = 256 << 10;
  void* payload = memory->Allocate(bytes);
  ASSERT_NE(payload, nullptr);
  auto to = sender->Connect(receiver->address());
  ASSERT_TRUE(to.ok()) << to.status();
  std::atomic<bool> done{false};
  const std::vector<uint8_t> frame(64, 1);
  sender->Send(*to, frame, payload, bytes, [&](absl::Status) { done = true; });
  if (!Eventually([&] { return borrowed.load() || done.load(); }) || !borrowed.load()) {
    GTEST_SKIP() << "not mappable in place here";
  }
  uint64_t seen = 0;
  {
    absl::MutexLock lock(&mu);
    seen = lease;
  }
  // A stranger who learned the lease releases it: nothing ends.
  Forger forger(sender->address());
  forger.Send(ucx_internal::kReleaseAmId,
              ucx_internal::EncodeRelease({seen, ucx_internal::ReleaseStatus::kReadInPlace}));
  ASSERT_TRUE(Eventually([&] { return sender->refusals().releases == 1; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(done.load()) << "a stranger ended the send while the payload was borrowed";
  // The receiver's own release does.
  {
    absl::MutexLock lock(&mu);
    receiver->Release(from, lease);
  }
  EXPECT_TRUE(Eventually([&] { return done.load(); }));
  receiver->Shutdown();
  sender->Shutdown();
  memory->Free(payload);
}

}  // namespace
}  // namespace tessel
