#include "rpc/registry_flags.h"

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "core/lease.h"
#include "gtest/gtest.h"
#include "rpc/lease_flags.h"

namespace tessel {
namespace {

TEST(RegistryFlagsTest, RegistryIsRequired) {
  absl::SetFlag(&FLAGS_registry, "");
  absl::StatusOr<std::string> address = RegistryAddressFromFlags();
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(address.status().message().find("--registry"), std::string::npos);
  absl::SetFlag(&FLAGS_registry, "10.0.0.1:7070");
  EXPECT_EQ(*RegistryAddressFromFlags(), "10.0.0.1:7070");
}

TEST(RegistryFlagsTest, LeaseDefaultsToTheOneConstant) {
  EXPECT_EQ(*LeaseTtlFromFlags(), kDefaultLeaseTtl);
  EXPECT_EQ(kDefaultLeaseTtl, absl::Seconds(3));
}

TEST(RegistryFlagsTest, LeaseMustBePositive) {
  for (int bad : {0, -5}) {
    absl::SetFlag(&FLAGS_lease_ttl_ms, bad);
    absl::StatusOr<absl::Duration> ttl = LeaseTtlFromFlags();
    ASSERT_FALSE(ttl.ok()) << bad;
    EXPECT_NE(ttl.status().message().find("--lease_ttl_ms"), std::string::npos);
  }
  absl::SetFlag(&FLAGS_lease_ttl_ms, 1500);
  EXPECT_EQ(*LeaseTtlFromFlags(), absl::Milliseconds(1500));
}

}  // namespace
}  // namespace tessel
