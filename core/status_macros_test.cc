#include "core/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace tessel {
namespace {

int evaluations = 0;

absl::Status Fails(absl::string_view why) {
  ++evaluations;
  return absl::InvalidArgumentError(why);
}
absl::Status Passes() {
  ++evaluations;
  return absl::OkStatus();
}
absl::StatusOr<std::unique_ptr<int>> Make(int v) {
  ++evaluations;
  if (v < 0) return absl::OutOfRangeError("negative");
  return std::make_unique<int>(v);
}

absl::Status ReturnIfError(bool fail, int* reached) {
  TESSEL_RETURN_IF_ERROR(Passes());
  ++*reached;
  TESSEL_RETURN_IF_ERROR(fail ? Fails("second") : Passes());
  ++*reached;
  return absl::OkStatus();
}

absl::StatusOr<int> AssignOrReturn(int a, int b) {
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<int> x, Make(a));  // a move-only value
  int y = 0;
  TESSEL_ASSIGN_OR_RETURN(auto yp, Make(b));
  y = *yp;
  TESSEL_RETURN_IF_ERROR(Make(a));  // a StatusOr as a status
  return *x + y;
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheFirstErrorAndEvaluatesOnce) {
  evaluations = 0;
  int reached = 0;
  EXPECT_TRUE(ReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 2);
  EXPECT_EQ(evaluations, 2);
  evaluations = 0;
  reached = 0;
  const absl::Status s = ReturnIfError(true, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "second");
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(evaluations, 2);
}

TEST(StatusMacrosTest, AssignOrReturnMovesTheValueOrReturnsTheStatus) {
  evaluations = 0;
  absl::StatusOr<int> sum = AssignOrReturn(2, 3);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 5);
  EXPECT_EQ(evaluations, 3);
  evaluations = 0;
  sum = AssignOrReturn(2, -1);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(evaluations, 2);  // stopped at the second call
  sum = AssignOrReturn(-1, 3);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tessel
