#include "core/status_macros.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
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

// A status type of another library (as grpc::Status is): an error code that
// passes through TESSEL_RETURN_IF_ERROR unchanged and is what the _AS forms
// convert an absl::Status into.
struct OtherStatus {
  bool ok() const { return code == 0; }
  int code = 0;
  std::string message;
};
int conversions = 0;
OtherStatus ToOther(const absl::Status& s) {
  ++conversions;
  return {static_cast<int>(s.code()), std::string(s.message())};
}
absl::StatusOr<int> Twice(int v) {
  ++evaluations;
  if (v < 0) return absl::OutOfRangeError("negative");
  return 2 * v;
}
OtherStatus OtherCheck(int code) {
  ++evaluations;
  return {code, code == 0 ? "" : "denied"};
}

OtherStatus Handler(int check, int a, int* out, int* reached) {
  TESSEL_RETURN_IF_ERROR(OtherCheck(check));  // passed on as it is
  ++*reached;
  TESSEL_RETURN_IF_ERROR_AS(a < 0 ? Fails("negative input") : Passes(), ToOther);
  ++*reached;
  TESSEL_ASSIGN_OR_RETURN_AS(std::unique_ptr<int> x, Make(a), ToOther);
  TESSEL_ASSIGN_OR_RETURN_AS(*out, Twice(a), ToOther);  // into an existing lvalue
  *out += *x;
  return {};
}

// One call of Handler, summed up: what it returned, the value it wrote, how
// far it got, and how often it evaluated an expression and converted.
std::string RunHandler(int check, int a) {
  evaluations = 0;
  conversions = 0;
  int out = 0, reached = 0;
  const OtherStatus s = Handler(check, a, &out, &reached);
  return absl::StrCat("code=", s.code, " message='", s.message, "' out=", out, " reached=", reached,
                      " evaluations=", evaluations, " conversions=", conversions);
}

TEST(StatusMacrosTest, ReturnIfErrorPassesAnotherStatusTypeOnUnchanged) {
  EXPECT_EQ(RunHandler(7, 1),
            "code=7 message='denied' out=0 reached=0 evaluations=1 conversions=0");
}

TEST(StatusMacrosTest, AsFormsConvertTheErrorAndMoveTheValue) {
  // Each expression evaluated once; out = Twice(2) + *Make(2).
  EXPECT_EQ(RunHandler(0, 2), "code=0 message='' out=6 reached=2 evaluations=4 conversions=0");
  EXPECT_EQ(RunHandler(0, -1),
            absl::StrCat("code=", static_cast<int>(absl::StatusCode::kInvalidArgument),
                         " message='negative input' out=0 reached=1 evaluations=2 "
                         "conversions=1"));
}

TEST(StatusMacrosTest, AssignOrReturnAsConvertsAStatusOrError) {
  conversions = 0;
  int out = 0, reached = 0;
  auto handler = [&](int a) -> OtherStatus {
    TESSEL_ASSIGN_OR_RETURN_AS(out, Twice(a), ToOther);
    ++reached;
    return {};
  };
  const OtherStatus s = handler(-3);
  EXPECT_EQ(s.code, static_cast<int>(absl::StatusCode::kOutOfRange));
  EXPECT_EQ(s.message, "negative");
  EXPECT_EQ(reached, 0);
  EXPECT_EQ(conversions, 1);
}

}  // namespace
}  // namespace tessel
