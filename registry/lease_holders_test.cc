// LeaseHolders (registry/lease_holders.h): a lease is renewed and ended only
// by the identity that joined with it.
#include "registry/lease_holders.h"

#include <gtest/gtest.h>

namespace tessel {
namespace {

TEST(LeaseHoldersTest, OnlyTheJoiningIdentityRenewsOrEnds) {
  LeaseHolders h;
  h.Bind(7, "token sha256:aa");
  EXPECT_TRUE(h.Check(7, "token sha256:aa", "Heartbeat").ok());
  const absl::Status other = h.Check(7, "token sha256:bb", "Leave");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("refuses Leave of lease 7"), std::string::npos) << other;
  EXPECT_EQ(other.message().find("sha256:aa"), std::string::npos) << "names the holder";
  EXPECT_EQ(h.Check(7, "", "Heartbeat").code(), absl::StatusCode::kPermissionDenied);
  h.Forget(7);
  EXPECT_TRUE(h.Check(7, "token sha256:bb", "Heartbeat").ok());
}

// A lease joined elsewhere (another replica, before a restart) is its first
// renewer's; an anonymous joiner's lease is every anonymous caller's.
TEST(LeaseHoldersTest, UnknownLeasesAreTheFirstRenewers) {
  LeaseHolders h;
  EXPECT_TRUE(h.Check(9, "token sha256:aa", "Heartbeat").ok());
  h.BindIfUnknown(9, "token sha256:aa");
  h.BindIfUnknown(9, "token sha256:bb");  // already bound: stays
  EXPECT_EQ(h.Check(9, "token sha256:bb", "Heartbeat").code(), absl::StatusCode::kPermissionDenied);
  h.Bind(3, "");
  EXPECT_TRUE(h.Check(3, "", "Leave").ok());
  EXPECT_EQ(h.size(), 2u);
  h.Retain({3});
  EXPECT_EQ(h.size(), 1u);
  EXPECT_TRUE(h.Check(9, "token sha256:bb", "Heartbeat").ok());  // forgotten
}

}  // namespace
}  // namespace tessel
