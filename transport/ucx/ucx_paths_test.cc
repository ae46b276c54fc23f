// How payloads move between two UCX endpoints is chosen when they connect,
// from the lanes UCX picked (ucp_ep_print_info), and reported: in place
// where a shared-memory transport maps the peer's memory, otherwise by UCX's
// rendezvous, which moves a large payload by RMA on the endpoint's rma_bw
// lanes (a cma get, a tcp put) straight from the sender's buffer into the
// receiver's.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "transport/transport_testing.h"
#include "transport/ucx/ucx_testing.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {

struct Case {
  const char* tls;
  bool zero_copy;
  std::string path;  // reported right after Connect, and after a payload
};

TEST(UcxPathsTest, ThePathIsChosenAtConnectTimeAndAPayloadTakesIt) {
  for (const Case& c :
       {Case{"posix,sysv,self", true, "in place"},
        Case{"posix,sysv,self", false, "copied (active messages over sysv)"},
        Case{"cma,tcp,self", true, "copied (rendezvous by RMA over " + CmaOrTcp() + ")"},
        Case{"tcp,self", true, "copied (rendezvous by RMA over tcp)"}}) {
    SCOPED_TRACE(std::string(c.tls) + (c.zero_copy ? "" : " zero_copy=false"));
    UcxOptions o;
    o.tls = c.tls;
    o.zero_copy = c.zero_copy;
    std::unique_ptr<UcxTransport> a = MakeUcxTransport(o);
    std::unique_ptr<UcxTransport> b = MakeUcxTransport(o);
    ASSERT_TRUE(a != nullptr && b != nullptr);
    const size_t n = 8 << 20;  // a rendezvous-sized payload from payload memory
    std::vector<uint8_t> dst(n);
    absl::Notification landed;
    std::atomic<PeerId> from{0};
    std::atomic<bool> was_in_place{false};
    b->SetHandler([&](const Incoming& in) {
      from = in.from;
      was_in_place = in.in_place != nullptr;
      return Accept{dst.data(), dst.size(), [&](absl::Status s) {
                      EXPECT_TRUE(s.ok()) << s;
                      landed.Notify();
                    }};
    });
    auto peer = a->Connect(b->address());
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ(a->PayloadPath(*peer), c.path) << "chosen at connect time";
    auto* src = static_cast<uint8_t*>(a->payload_memory()->Allocate(n));
    ASSERT_NE(src, nullptr);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    absl::Notification sent;
    const uint8_t header[4] = {1, 2, 3, 4};
    a->Send(*peer, header, src, n, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      sent.Notify();
    });
    ASSERT_TRUE(landed.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(sent.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_EQ(std::memcmp(src, dst.data(), n), 0);
    EXPECT_EQ(was_in_place.load(), c.path == "in place")
        << "a descriptor only where the memory maps";
    EXPECT_EQ(a->PayloadPath(*peer), c.path);
    EXPECT_EQ(b->PayloadPath(from.load()), c.path) << "the receiver chose the same";
    a->Shutdown();
    b->Shutdown();
    a->payload_memory()->Free(src);
  }
}

}  // namespace
}  // namespace tessel
