// ParseEpInfo reads the lanes UCX chose out of ucp_ep_print_info's text
// (as UCX 1.13.1 prints it on this machine); DescribeCopied names the copied
// path. The end-to-end choice is in ucx_paths_test.
#include "transport/ucx/internal/ep_lanes.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

// ucp_ep_print_info of UCX 1.13.1 on this machine, per UCX_TLS.
constexpr char kShm[] = R"(#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:sysv/memory.0 md[1]           -> md[1]/sysv/sysdev[255] am am_bw#0
#                 lane[1]:  2:posix/memory.0 md[2]          -> md[2]/posix/sysdev[255]
#
#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)
#                  rma_bw: mds rndv_rkey_size 9
#
)";
constexpr char kTcp[] = R"(#
# UCP endpoint
#               peer: <no debug data>
#                 lane[0]:  2:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] rma_bw#0 am am_bw#0
#                 lane[1]:  1:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] rma_bw#1 wireup
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..8192..<rndv>..(inf)
)";
constexpr char kCma[] = R"(#
#                 lane[0]:  2:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am am_bw#0 wireup
#                 lane[1]:  3:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] rma_bw#0
)";

TEST(EpLanesTest, LanesAreReadFromUcxsEndpointInfo) {
  EpLanes shm = ParseEpInfo(kShm);
  EXPECT_TRUE(shm.mappable);
  EXPECT_EQ(shm.am, std::vector<std::string>{"sysv"});
  EXPECT_TRUE(shm.rma.empty());
  EXPECT_EQ(DescribeCopied(shm), "copied (active messages over sysv)");

  EpLanes tcp = ParseEpInfo(kTcp);
  EXPECT_FALSE(tcp.mappable);
  EXPECT_EQ(tcp.rma, std::vector<std::string>{"tcp"}) << "two tcp lanes name tcp once";
  EXPECT_EQ(DescribeCopied(tcp), "copied (rendezvous by RMA over tcp)");

  EpLanes cma = ParseEpInfo(kCma);
  EXPECT_FALSE(cma.mappable);
  EXPECT_EQ(cma.am, std::vector<std::string>{"tcp"});
  EXPECT_EQ(DescribeCopied(cma), "copied (rendezvous by RMA over cma)");

  EXPECT_EQ(DescribeCopied(ParseEpInfo("garbage\n# lane[0]: x")), "copied");
}

TEST(EpLanesTest, LinesThatAreNotLanesAreSkipped) {
  EpLanes none = ParseEpInfo("");
  EXPECT_FALSE(none.mappable);
  EXPECT_TRUE(none.am.empty() && none.rma.empty());
  // A lane without a transport ("3cma" has no ':'), one with '/' before ':',
  // and one with nothing after the arrow.
  EpLanes odd = ParseEpInfo(
      "# lane[0]: 3cma/memory.0 md[2] -> md[2]/cma am\n"
      "# lane[1]: tcp/x:1 md[1] -> md[1] am\n"
      "# lane[2]: 1:xpmem/memory.0 md[1] ->\n");
  EXPECT_TRUE(odd.mappable) << "the xpmem lane maps memory";
  EXPECT_TRUE(odd.am.empty());
  EXPECT_TRUE(odd.rma.empty());
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
