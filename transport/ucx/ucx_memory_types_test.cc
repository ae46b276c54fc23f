// The UCX transport reports the memory kinds besides host memory that its
// UCX can move (ucp_context_query), and they agree with what `ucx_info -d`
// lists: CUDA memory exactly when a cuda_copy or cuda_ipc transport is there
// (Debian's UCX has none, so GPU workers stage through host memory:
// docs/gpu.md).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/ucx/ucx_transport.h"

namespace tessel {
namespace {

TEST(UcxMemoryTypesTest, AgreeWithUcxInfo) {
  auto transport = UcxTransport::Create(UcxOptions{});
  ASSERT_TRUE(transport.ok()) << transport.status();
  const std::vector<std::string> types = (*transport)->DeviceMemoryTypes();
  (*transport)->Shutdown();
  bool reports_cuda = false;
  for (const std::string& t : types) {
    std::printf("UCX moves %s memory\n", t.c_str());
    EXPECT_NE(t, "host");
    if (t == "cuda") reports_cuda = true;
  }
  if (types.empty()) std::printf("UCX moves host memory only\n");

  std::unique_ptr<FILE, int (*)(FILE*)> info(
      popen("ucx_info -d 2>/dev/null | grep -E 'Transport: (cuda_copy|cuda_ipc)$'", "r"), pclose);
  ASSERT_NE(info, nullptr);
  std::string listed;
  char line[256];
  while (std::fgets(line, sizeof line, info.get()) != nullptr) listed += line;
  const int rc = pclose(info.release());
  if (rc != 0 && listed.empty()) {
    // grep found nothing (1), or ucx_info is missing: check it is there.
    ASSERT_EQ(std::system("command -v ucx_info > /dev/null"), 0)
        << "ucx_info (Debian's ucx-utils) is needed for the cross-check";
  }
  EXPECT_EQ(reports_cuda, !listed.empty()) << "ucx_info lists:\n" << listed;
}

}  // namespace
}  // namespace tessel
