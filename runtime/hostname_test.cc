#include "runtime/hostname.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(HostnameTest, OrdinalIsTheTrailingNumber) {
  EXPECT_EQ(*OrdinalOf("tessel-server-0"), 0);
  EXPECT_EQ(*OrdinalOf("tessel-server-17"), 17);
  EXPECT_EQ(*OrdinalOf("a-b-c-3"), 3);
}

TEST(HostnameTest, NamesWithoutAnOrdinalAreRefused) {
  for (const char* name :
       {"tessel-server", "tessel-server-", "server3", "tessel-server-x1", "tessel-server-1a", ""}) {
    auto ordinal = OrdinalOf(name);
    EXPECT_EQ(ordinal.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

TEST(HostnameTest, HostnameEnvironmentWins) {
  setenv("HOSTNAME", "tessel-server-5", 1);
  EXPECT_EQ(HostName(), "tessel-server-5");
  EXPECT_EQ(*OrdinalFromHostname(), 5);
  unsetenv("HOSTNAME");
  EXPECT_FALSE(HostName().empty());
}

}  // namespace
}  // namespace tessel
