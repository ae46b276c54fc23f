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

TEST(SendLeasesTest, NumbersAreNeverReusedAndTakeEndsTheHold) {
  SendLeases leases;
  std::vector<absl::Status> ends;
  const uint64_t a = leases.Open(Recording(4, &ends));
  const uint64_t b = leases.Open(Recording(5, &ends));
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  std::optional<SendLeases::Lease> got = leases.Take(a);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->peer, 4u);
  EXPECT_EQ(got->header, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(leases.Take(a).has_value()) << "taken once";
  EXPECT_EQ(leases.Open(Recording(6, &ends)), 3u);
  EXPECT_EQ(leases.size(), 2u);
  EXPECT_TRUE(ends.empty()) << "Take leaves `done` to the caller";
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
  EXPECT_EQ(leases.Open(Recording(3, &ends)), 3u) << "numbers go on after TakeAll";
}

}  // namespace
}  // namespace ucx_internal
}  // namespace tessel
