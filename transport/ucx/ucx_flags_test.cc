// --ucx_* flags become UcxOptions; bad values are refused naming the flag.
#include "transport/ucx/ucx_flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

class UcxFlagsTest : public ::testing::Test {
 protected:
  absl::FlagSaver saver_;  // each test's flags are restored after it
};

TEST_F(UcxFlagsTest, DefaultsAreUcxOptionsDefaults) {
  absl::StatusOr<UcxOptions> o = UcxOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  const UcxOptions defaults;
  EXPECT_EQ(o->tls, defaults.tls);
  EXPECT_EQ(o->tcp_port_range, defaults.tcp_port_range);
  EXPECT_EQ(o->zero_copy, defaults.zero_copy);
  EXPECT_EQ(o->peer_error_handling, defaults.peer_error_handling);
  EXPECT_EQ(o->spin, defaults.spin);
  EXPECT_EQ(o->in_place_min_bytes, defaults.in_place_min_bytes);
  EXPECT_EQ(o->poll_mode, SpinMode::kAuto);
  EXPECT_EQ(o->poll_mode, defaults.poll_mode);
}

TEST_F(UcxFlagsTest, FlagsBecomeOptions) {
  absl::SetFlag(&FLAGS_ucx_tls, "tcp");
  absl::SetFlag(&FLAGS_ucx_port_range, "7200-7299");
  absl::SetFlag(&FLAGS_ucx_zero_copy, false);
  absl::SetFlag(&FLAGS_ucx_peer_errors, true);
  absl::SetFlag(&FLAGS_ucx_spin_us, 0);
  absl::SetFlag(&FLAGS_ucx_in_place_min_bytes, 0);
  absl::SetFlag(&FLAGS_poll_mode, "event");
  absl::StatusOr<UcxOptions> o = UcxOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->poll_mode, SpinMode::kEvent);
  EXPECT_EQ(o->tls, "tcp");
  EXPECT_EQ(o->tcp_port_range, "7200-7299");
  EXPECT_FALSE(o->zero_copy);
  EXPECT_TRUE(o->peer_error_handling);
  EXPECT_EQ(o->spin, absl::ZeroDuration());
  EXPECT_EQ(o->in_place_min_bytes, 0u);
}

TEST_F(UcxFlagsTest, BadValuesNameTheFlag) {
  absl::SetFlag(&FLAGS_ucx_spin_us, -1);
  absl::StatusOr<UcxOptions> o = UcxOptionsFromFlags();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--ucx_spin_us"), std::string::npos) << o.status();
  absl::SetFlag(&FLAGS_ucx_spin_us, 10);

  absl::SetFlag(&FLAGS_poll_mode, "busy");
  o = UcxOptionsFromFlags();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--poll_mode"), std::string::npos) << o.status();
  absl::SetFlag(&FLAGS_poll_mode, "spin");

  absl::SetFlag(&FLAGS_ucx_in_place_min_bytes, -5);
  o = UcxOptionsFromFlags();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--ucx_in_place_min_bytes"), std::string::npos) << o.status();
  absl::SetFlag(&FLAGS_ucx_in_place_min_bytes, 0);

  for (const char* range : {"7200", "7299-7200", "0-10", "7200-70000", "a-b", "7200-7300x"}) {
    absl::SetFlag(&FLAGS_ucx_port_range, range);
    o = UcxOptionsFromFlags();
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << range;
    EXPECT_NE(o.status().message().find("--ucx_port_range"), std::string::npos) << o.status();
  }
}

TEST(UcxEnvironmentTest, InPlaceMinBytesOverridesAndIsValidated) {
  UcxOptions o;
  o.in_place_min_bytes = 100;
  unsetenv("TESSEL_UCX_IN_PLACE_MIN_BYTES");
  absl::StatusOr<UcxOptions> same = WithUcxEnvironment(o);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->in_place_min_bytes, 100u);
  setenv("TESSEL_UCX_IN_PLACE_MIN_BYTES", "0", 1);
  absl::StatusOr<UcxOptions> zero = WithUcxEnvironment(o);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->in_place_min_bytes, 0u);
  for (const char* bad : {"", "-1", "12k", "x"}) {
    setenv("TESSEL_UCX_IN_PLACE_MIN_BYTES", bad, 1);
    absl::StatusOr<UcxOptions> refused = WithUcxEnvironment(o);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("TESSEL_UCX_IN_PLACE_MIN_BYTES"), std::string::npos);
  }
  unsetenv("TESSEL_UCX_IN_PLACE_MIN_BYTES");
}

TEST(UcxOptionsTest, ValidateRefusesANegativeSpin) {
  UcxOptions o;
  EXPECT_TRUE(ValidateUcxOptions(o).ok());
  o.spin = -absl::Microseconds(1);
  EXPECT_EQ(ValidateUcxOptions(o).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessel
