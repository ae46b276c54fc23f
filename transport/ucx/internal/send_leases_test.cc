#include "transport/ucx/internal/send_leases.h"

#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace ucx_internal {
namespace {

// A lease whose done records how it ended.
SendLeases::Lease Recording(PeerId peer, std::vector<absl::Status>* ends) {
  SendLeases::Lease l;
  l.peer = peer;
  l.header = {1, 2, 3};
  l.bytes = 64;
  l.done = [ends](absl::Status s) { ends->push_back(s); };
  return l;
}

TEST(SendLeasesTest, TakeFromEndsTheHoldOnce) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  const uint64_t a = leases.Open(Recording(4, &ends));
  const uint64_t b = leases.Open(Recording(5, &ends));
  EXPECT_NE(a, b);
  std::optional<SendLeases::Lease> got = leases.TakeFrom(a, 4);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->peer, 4u);
  EXPECT_EQ(got->header, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(leases.TakeFrom(a, 4).has_value()) << "taken once";
  leases.Open(Recording(6, &ends));
  EXPECT_EQ(leases.size(), 2u);
  EXPECT_TRUE(ends.empty()) << "TakeFrom leaves `done` to the caller";
}

// Issue 42: a RELEASE is bound to the peer the lease was sent to. Another
// peer naming the lease ends nothing (the receiver may still be reading the
// payload in place) and is counted.
TEST(SendLeasesTest, ReleaseFromAnotherPeerIsRefusedAndTheLeaseStaysHeld) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  const uint64_t a = leases.Open(Recording(4, &ends));
  EXPECT_FALSE(leases.TakeFrom(a, 7).has_value());
  EXPECT_EQ(leases.misdirected(), 1u);
  EXPECT_EQ(leases.size(), 1u);
  EXPECT_TRUE(ends.empty());
  EXPECT_TRUE(leases.TakeFrom(a, 4).has_value()) << "its own peer still can";
}

// Issue 42: lease numbers are not sequential (a stranger cannot guess the
// next one from one it saw): no two of many are adjacent, and none is 0.
TEST(SendLeasesTest, NumbersAreNotSequential) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(leases.Open(Recording(1, &ends)));
  int adjacent = 0;
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_NE(ids[i], 0u);
    adjacent += ids[i] == ids[i - 1] + 1 ? 1 : 0;
  }
  EXPECT_EQ(adjacent, 0);
  EXPECT_EQ(leases.size(), 64u) << "all distinct";
}

TEST(SendLeasesTest, EndRunsDoneOnceAndOnlyForAHeldLease) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  const uint64_t a = leases.Open(Recording(1, &ends));
  leases.End(a, absl::UnavailableError("descriptor send failed"));
  leases.End(a, absl::OkStatus());
  leases.End(99, absl::OkStatus());
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].code(), absl::StatusCode::kUnavailable);
}

TEST(SendLeasesTest, TakeAllEmptiesTheTable) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  leases.Open(Recording(1, &ends));
  leases.Open(Recording(2, &ends));
  std::vector<SendLeases::Lease> all = leases.TakeAll();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(leases.size(), 0u);
  for (SendLeases::Lease& l : all) l.done(absl::CancelledError("worker gone"));
  EXPECT_EQ(ends.size(), 2u);
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
