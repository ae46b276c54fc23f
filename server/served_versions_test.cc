// ServedVersions: which buffer holds which version (v % 2 where two are
// kept), the update's source and destination, the served bytes of each
// version (half copies under mixed precision), and the memory rule.
#include "server/served_versions.h"

#include <cstring>
#include <vector>

#include "core/precision.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

TEST(ServedVersionsTest, VersionsAlternateBetweenTwoBuffers) {
  EXPECT_EQ(ServedVersions::BufferFor(0, 2), 0);
  EXPECT_EQ(ServedVersions::BufferFor(7, 2), 1);
  EXPECT_EQ(ServedVersions::BufferFor(8, 2), 0);
  EXPECT_EQ(ServedVersions::BufferFor(7, 1), 0) << "one buffer: every version";
  ServedVersions v(/*holds_params=*/true, std::nullopt, 8, nullptr);
  EXPECT_EQ(v.kept(), 2);
  EXPECT_NE(v.values(4), v.values(5));
  EXPECT_EQ(v.values(4), v.values(6));
  // The update of step 5 reads version 4 and writes version 5's buffer.
  EXPECT_EQ(v.update_in(4), v.values(4));
  EXPECT_EQ(v.update_out(4), v.values(5));
  EXPECT_EQ(v.served(5, 3), v.values(5) + 3);
  EXPECT_EQ(v.bytes(), 8 * 8);
}

TEST(ServedVersionsTest, MixedPrecisionUpdatesMastersInPlaceAndKeepsTwoHalfCopies) {
  ServedVersions v(/*holds_params=*/true, HalfType::kBF16, 4, nullptr);
  EXPECT_EQ(v.update_in(2), v.update_out(2)) << "the masters are not served: in place";
  std::vector<float> m = {1.f, 2.f, 3.f, 4.f};
  std::memcpy(v.values(2), m.data(), 16);
  v.RefreshHalf(2, 0, 4);
  m = {5.f, 6.f, 7.f, 8.f};
  std::memcpy(v.values(3), m.data(), 16);
  v.RefreshHalf(3, 1, 2);  // the new version's copy of elements 1 and 2
  std::vector<float> v2(4), v3(2);
  HalfToFloat(HalfType::kBF16, static_cast<const uint16_t*>(v.served(2, 0)), v2.data(), 4);
  HalfToFloat(HalfType::kBF16, static_cast<const uint16_t*>(v.served(3, 1)), v3.data(), 2);
  EXPECT_EQ(v2, (std::vector<float>{1.f, 2.f, 3.f, 4.f})) << "version 2's copy untouched";
  EXPECT_EQ(v3, (std::vector<float>{6.f, 7.f}));
  EXPECT_EQ(v.bytes(), 4 * (4 + 2 * 2));
}

TEST(ServedVersionsTest, DdpKeepsOneBuffer) {
  ServedVersions v(/*holds_params=*/false, std::nullopt, 4, nullptr);
  EXPECT_EQ(v.kept(), 1);
  EXPECT_EQ(v.values(0), v.values(1));
  EXPECT_EQ(v.update_in(0), v.update_out(0));
  EXPECT_EQ(v.bytes(), 4 * 4);
  ServedVersions half(/*holds_params=*/false, HalfType::kF16, 4, nullptr);
  EXPECT_EQ(half.served(0, 0), half.served(1, 0));
  EXPECT_EQ(half.bytes(), 4 * (4 + 2));
}

TEST(ServedVersionsTest, BytesPerElement) {
  EXPECT_EQ(ServedVersions::BytesPerElement(true, false), 8) << "fp32: two versions of masters";
  EXPECT_EQ(ServedVersions::BytesPerElement(true, true), 8) << "masters + two half copies";
  EXPECT_EQ(ServedVersions::BytesPerElement(false, false), 4) << "DDP: the mean";
  EXPECT_EQ(ServedVersions::BytesPerElement(false, true), 6) << "and its half copy";
}

}  // namespace
}  // namespace tessel
