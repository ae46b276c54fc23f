// UcxContext and UcxPayloadMemory against the real UCX (no transport, no
// threads): regions are zeroed, registered (a packed key each), found by any
// range inside them, and outlive nothing they need.
#include "transport/ucx/internal/payload_memory.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "transport/ucx/internal/context.h"
#include "transport/ucx/internal/ucp_testing.h"

namespace tessel {
namespace ucx_internal {
namespace {

TEST(UcxContextTest, RefusesAMalformedPortRange) {
  UcxOptions range;
  range.tcp_port_range = "7299-7200";
  auto c = UcxContext::Create(range);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("7299-7200"), std::string::npos) << c.status();
}

TEST(UcxContextTest, ReportsDeviceMemoryTypesWithoutHost) {
  std::shared_ptr<UcxContext> context = TestContext();
  ASSERT_NE(context, nullptr);
  ASSERT_NE(context->get(), nullptr);
  for (const std::string& t : context->device_memory_types()) EXPECT_NE(t, "host");
}

TEST(UcxPayloadMemoryTest, RegionsAreZeroedAndFoundByAnyRangeInside) {
  auto memory = std::make_shared<UcxPayloadMemory>(TestContext());
  EXPECT_EQ(memory->Allocate(0), nullptr);
  const size_t n = 1 << 16;
  auto* a = static_cast<uint8_t*>(memory->Allocate(n));
  auto* b = static_cast<uint8_t*>(memory->Allocate(n));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(a, a + n), std::vector<uint8_t>(n, 0));
  std::memset(a, 7, n);  // writable

  auto whole = memory->Find(a, n);
  ASSERT_TRUE(whole.has_value());
  EXPECT_EQ(whole->base, reinterpret_cast<uintptr_t>(a));
  ASSERT_NE(whole->rkey, nullptr);
  EXPECT_FALSE(whole->rkey->empty());
  auto inside = memory->Find(a + 100, 50);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->id, whole->id);
  EXPECT_EQ(inside->base, whole->base);
  auto other = memory->Find(b, 1);
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->id, whole->id);

  EXPECT_FALSE(memory->Find(a + n - 10, 20).has_value()) << "runs past the region";
  std::vector<uint8_t> heap(64);
  EXPECT_FALSE(memory->Find(heap.data(), heap.size()).has_value());
  EXPECT_FALSE(memory->Free(heap.data())) << "not ours";

  EXPECT_TRUE(memory->Free(a));
  EXPECT_FALSE(memory->Find(a, 1).has_value());
  EXPECT_FALSE(memory->Free(a)) << "already freed";
  auto* c = memory->Allocate(n);
  ASSERT_NE(c, nullptr);
  auto found = memory->Find(c, n);
  ASSERT_TRUE(found.has_value());
  EXPECT_GT(found->id, other->id) << "ids are never reused";
  EXPECT_TRUE(memory->Free(b));
  // `c` is left for the destructor to unmap.
}

TEST(UcxPayloadMemoryTest, MemoryKeepsTheContextAlive) {
  std::shared_ptr<UcxContext> context = TestContext();
  std::weak_ptr<UcxContext> weak = context;
  auto memory = std::make_shared<UcxPayloadMemory>(std::move(context));
  void* p = memory->Allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(weak.expired());
  EXPECT_TRUE(memory->Free(p));
  memory.reset();
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
