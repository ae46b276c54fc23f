// ValidateTensors: what every writer accepts, and every problem named.
#include "client/tensor_files/named_tensor.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessel::tensor_files {
namespace {

TEST(NamedTensorTest, CountsElementsOfEveryShape) {
  EXPECT_EQ(NumElements({}), 1);  // 0-d
  EXPECT_EQ(NumElements({1}), 1);
  EXPECT_EQ(NumElements({0}), 0);
  EXPECT_EQ(NumElements({2, 0, 5}), 0);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({-1, 3}), -1);
  EXPECT_EQ(NumElements({int64_t{1} << 40, int64_t{1} << 40}), -1);  // overflows
}

TEST(NamedTensorTest, AcceptsZeroDimAndEmptyTensors) {
  const std::vector<float> one(1), six(6);
  EXPECT_TRUE(ValidateTensors({}).ok());
  EXPECT_TRUE(ValidateTensors({{"scalar", {}, one},
                               {"vector1", {1}, one},
                               {"empty", {0}, {}},
                               {"empty2d", {0, 4}, {}},
                               {"m", {2, 3}, six},
                               {"unicode.\xc3\xa9", {6}, six}})
                  .ok());
}

TEST(NamedTensorTest, NamesEveryProblemSorted) {
  const std::vector<float> one(1), six(6);
  const absl::Status s = ValidateTensors({{"w", {2, 3}, six},
                                          {"w", {6}, six},
                                          {"", {1}, one},
                                          {"short", {2, 2}, six},
                                          {"neg", {-2}, {}},
                                          {"bad\xff", {1}, one},
                                          {std::string("nul\0x", 5), {1}, one}});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "a tensor has an empty name; "
            "tensor 'neg' has shape [-2]: a dimension is negative or the size overflows; "
            "tensor 'short' has shape [2, 2] (4 elements) but 6 values; "
            "tensor name 'bad\\377' is not UTF-8 text without NUL; "
            "tensor name 'nul\\000x' is not UTF-8 text without NUL; "
            "tensor name 'w' appears more than once");
}

TEST(NamedTensorTest, RejectsMalformedUtf8) {
  const std::vector<float> one(1);
  for (const char* name : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    EXPECT_FALSE(ValidateTensors({{name, {1}, one}}).ok()) << name;
  }
  EXPECT_TRUE(ValidateTensors({{"\xe2\x82\xac\xf0\x9f\x98\x80", {1}, one}}).ok());
}

}  // namespace
}  // namespace tessel::tensor_files
