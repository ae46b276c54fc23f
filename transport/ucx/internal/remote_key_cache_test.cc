// RemoteKeyCache's bookkeeping with fake UCX handles: keys are unpacked once
// per (endpoint, region), bounded per endpoint and in time, never dropped
// while borrowed, and a reset worker lives until its last borrow ends.
#include "transport/ucx/internal/remote_key_cache.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

// Hands out fake rkeys (1, 2, 3, ...) and records what was destroyed.
struct FakeOps : RemoteKeyOps {
  struct Log {
    int unpacked = 0;
    std::set<void*> live;  // rkeys not destroyed yet
    std::vector<void*> destroyed_workers;
    bool fail_unpack = false;
    bool mappable = true;
  };
  explicit FakeOps(Log* log) : log(log) {}
  absl::StatusOr<void*> Unpack(void*, absl::Span<const uint8_t> packed) override {
    if (log->fail_unpack) return absl::UnavailableError("ucp_ep_rkey_unpack: fake");
    EXPECT_FALSE(packed.empty());
    void* rkey = reinterpret_cast<void*>(static_cast<uintptr_t>(++log->unpacked));
    log->live.insert(rkey);
    return rkey;
  }
  char* Map(void*, uint64_t remote_base) override {
    return log->mappable ? reinterpret_cast<char*>(remote_base + 0x1000) : nullptr;
  }
  void Destroy(void* rkey) override { EXPECT_EQ(log->live.erase(rkey), 1u) << "twice"; }
  void DestroyWorker(void* worker) override { log->destroyed_workers.push_back(worker); }
  Log* log;
};

void* Handle(uintptr_t n) { return reinterpret_cast<void*>(n); }
const std::vector<uint8_t> kPacked = {1, 2, 3};
const absl::Time kT0 = absl::FromUnixSeconds(1000000);
constexpr uint64_t kRegionBytes = 1 << 20;

class RemoteKeyCacheTest : public ::testing::Test {
 protected:
  RemoteKey* Get(uintptr_t ep, uint64_t region, absl::Time now = kT0, uintptr_t worker = 100) {
    auto key =
        cache_.Get(Handle(ep), Handle(worker), region, kPacked, region << 20, kRegionBytes, now);
    EXPECT_TRUE(key.ok()) << key.status();
    return key.ok() ? *key : nullptr;
  }
  FakeOps::Log log_;
  RemoteKeyCache cache_{std::make_unique<FakeOps>(&log_)};
};

TEST_F(RemoteKeyCacheTest, UnpacksOncePerEndpointAndRegion) {
  RemoteKey* a = Get(1, 7);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->mapped, reinterpret_cast<char*>((7u << 20) + 0x1000));
  EXPECT_EQ(Get(1, 7), a);
  EXPECT_EQ(log_.unpacked, 1);
  EXPECT_NE(Get(2, 7), a) << "another endpoint unpacks its own";
  EXPECT_NE(Get(1, 8), a);
  EXPECT_EQ(log_.unpacked, 3);
  EXPECT_EQ(cache_.size(), 3u);
}

// Issue 42: a region keeps the base and size it was first described with;
// a later descriptor of the same region that says otherwise (to stretch the
// bounds its payloads are checked against) is refused, and the key stays.
TEST_F(RemoteKeyCacheTest, ARegionDescribedOtherwiseIsRefused) {
  RemoteKey* a = Get(1, 7);
  ASSERT_NE(a, nullptr);
  auto bigger = cache_.Get(Handle(1), Handle(100), 7, kPacked, 7u << 20, kRegionBytes * 2, kT0);
  EXPECT_EQ(bigger.status().code(), absl::StatusCode::kInvalidArgument) << bigger.status();
  auto moved = cache_.Get(Handle(1), Handle(100), 7, kPacked, 8u << 20, kRegionBytes, kT0);
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kInvalidArgument) << moved.status();
  EXPECT_EQ(Get(1, 7), a);
  EXPECT_EQ(a->region_bytes, kRegionBytes);
  EXPECT_EQ(log_.unpacked, 1);
}

TEST_F(RemoteKeyCacheTest, UnpackErrorsAndUnmappableRegions) {
  log_.fail_unpack = true;
  auto failed = cache_.Get(Handle(1), Handle(100), 7, kPacked, 0, kRegionBytes, kT0);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cache_.size(), 0u);
  log_.fail_unpack = false;
  log_.mappable = false;
  RemoteKey* key = Get(1, 7);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->mapped, nullptr) << "cached, but not mappable";
}

TEST_F(RemoteKeyCacheTest, KeepsAtMostSixteenPerEndpointDroppingTheLeastRecentlyUsed) {
  for (uint64_t r = 0; r < kKeysPerEndpoint; ++r) Get(1, r, kT0 + absl::Milliseconds(r));
  Get(1, 0, kT0 + absl::Milliseconds(100));  // region 0 used again: region 1 is now oldest
  RemoteKey* borrowed = Get(1, 2, kT0 + absl::Milliseconds(2));
  cache_.Borrow(/*from=*/5, /*lease=*/9, borrowed);
  Get(2, 0);  // another endpoint does not count
  EXPECT_EQ(cache_.size(), kKeysPerEndpoint + 1u);
  Get(1, 100, kT0 + absl::Milliseconds(200));
  EXPECT_EQ(cache_.size(), kKeysPerEndpoint + 1u) << "one dropped for the new one";
  const int unpacked = log_.unpacked;
  Get(1, 0, kT0 + absl::Milliseconds(201));
  Get(1, 2, kT0 + absl::Milliseconds(201));
  EXPECT_EQ(log_.unpacked, unpacked) << "region 0 (used again) and 2 (borrowed) stayed";
  Get(1, 1, kT0 + absl::Milliseconds(202));
  EXPECT_EQ(log_.unpacked, unpacked + 1) << "region 1 was the least recently used";
}

TEST_F(RemoteKeyCacheTest, IdleKeysGoUnlessBorrowed) {
  void* idle_rkey = Get(1, 1)->rkey;
  RemoteKey* borrowed = Get(1, 2);
  cache_.Borrow(5, 9, borrowed);
  Get(2, 3, kT0 + kKeyIdle);  // not idle long enough yet
  EXPECT_EQ(cache_.size(), 3u);
  Get(2, 3, kT0 + kKeyIdle + absl::Seconds(2));
  EXPECT_EQ(cache_.size(), 2u) << "the idle unborrowed key went";
  EXPECT_EQ(log_.live.count(idle_rkey), 0u) << "and its rkey was destroyed";
  bool tell = false;
  ASSERT_TRUE(cache_.EndBorrow(5, 9, &tell));
  EXPECT_TRUE(tell);
  EXPECT_EQ(cache_.size(), 2u) << "an ended borrow leaves the key cached";
  Get(2, 3, kT0 + kKeyIdle * 3);
  EXPECT_EQ(cache_.size(), 1u);
}

TEST_F(RemoteKeyCacheTest, ABorrowedLeaseIsKnownUntilItEnds) {
  EXPECT_FALSE(cache_.IsBorrowed(3, 20));
  cache_.Borrow(3, 20, Get(3, 1));
  EXPECT_TRUE(cache_.IsBorrowed(3, 20));
  EXPECT_FALSE(cache_.IsBorrowed(4, 20)) << "per peer";
  bool tell = false;
  ASSERT_TRUE(cache_.EndBorrow(3, 20, &tell));
  EXPECT_FALSE(cache_.IsBorrowed(3, 20));
}

TEST_F(RemoteKeyCacheTest, EndBorrowOfAnUnknownLeaseIsFalse) {
  bool tell = true;
  EXPECT_FALSE(cache_.EndBorrow(1, 2, &tell));
  cache_.Borrow(1, 2, Get(1, 1));
  EXPECT_TRUE(cache_.EndBorrow(1, 2, &tell));
  EXPECT_FALSE(cache_.EndBorrow(1, 2, &tell)) << "once";
}

TEST_F(RemoteKeyCacheTest, ARetiredWorkerLivesUntilItsLastBorrowEnds) {
  EXPECT_FALSE(cache_.RetireWorker(Handle(100))) << "nothing borrowed: destroy it now";
  RemoteKey* a = Get(1, 1);
  RemoteKey* b = Get(1, 2);
  Get(1, 3);
  cache_.Borrow(5, 1, a);
  cache_.Borrow(5, 2, a);
  cache_.Borrow(6, 1, b);
  EXPECT_TRUE(cache_.RetireWorker(Handle(100)));
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_EQ(log_.live.size(), 2u) << "the unborrowed key went, the borrowed stay mapped";
  EXPECT_TRUE(a->retired);
  EXPECT_EQ(a->mapped, reinterpret_cast<char*>((1u << 20) + 0x1000));
  // A new worker's keys are separate.
  RemoteKey* fresh = Get(1, 1, kT0, /*worker=*/200);
  EXPECT_NE(fresh, a);
  bool tell = true;
  ASSERT_TRUE(cache_.EndBorrow(5, 1, &tell));
  EXPECT_FALSE(tell) << "a retired key's sender cannot be reached";
  ASSERT_TRUE(cache_.EndBorrow(6, 1, &tell));
  EXPECT_TRUE(log_.destroyed_workers.empty()) << "a is still borrowed";
  ASSERT_TRUE(cache_.EndBorrow(5, 2, &tell));
  EXPECT_EQ(log_.destroyed_workers, std::vector<void*>{Handle(100)});
  EXPECT_EQ(log_.live.size(), 1u) << "only the new worker's key";
}

TEST_F(RemoteKeyCacheTest, ClearEndsBorrowsAndDestroysEverything) {
  RemoteKey* a = Get(1, 1);
  cache_.Borrow(5, 1, a);
  ASSERT_TRUE(cache_.RetireWorker(Handle(100)));
  RemoteKey* b = Get(1, 1, kT0, 200);
  cache_.Borrow(5, 2, b);
  Get(1, 2, kT0, 200);
  cache_.Clear();
  EXPECT_TRUE(log_.live.empty());
  EXPECT_EQ(log_.destroyed_workers, std::vector<void*>{Handle(100)})
      << "the current worker is the caller's";
  EXPECT_EQ(cache_.size(), 0u);
  bool tell = false;
  EXPECT_FALSE(cache_.EndBorrow(5, 2, &tell));
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
