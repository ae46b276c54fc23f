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
  ServedVersions v(ServedVersions::Kept(/*holds_params=*/true, /*in_place_update=*/false),
                   std::nullopt, 8, nullptr);
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
  ServedVersions v(ServedVersions::Kept(true, false), HalfType::kBF16, 4, nullptr);
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
  ServedVersions v(ServedVersions::Kept(/*holds_params=*/false, false), std::nullopt, 4, nullptr);
  EXPECT_EQ(v.kept(), 1);
  EXPECT_EQ(v.values(0), v.values(1));
  EXPECT_EQ(v.update_in(0), v.update_out(0));
  EXPECT_EQ(v.bytes(), 4 * 4);
  ServedVersions half(ServedVersions::Kept(false, false), HalfType::kF16, 4, nullptr);
  EXPECT_EQ(half.served(0, 0), half.served(1, 0));
  EXPECT_EQ(half.bytes(), 4 * (4 + 2));
}

TEST(ServedVersionsTest, BytesPerElement) {
  EXPECT_EQ(ServedVersions::BytesPerElement(2, false), 8) << "fp32: two versions of masters";
  EXPECT_EQ(ServedVersions::BytesPerElement(2, true), 8) << "masters + two half copies";
  EXPECT_EQ(ServedVersions::BytesPerElement(1, false), 4) << "DDP, or in place: one";
  EXPECT_EQ(ServedVersions::BytesPerElement(1, true), 6) << "and its half copy";
}

// A job whose workers do not rejoin in place (JobSpec.in_place_update)
// keeps one version and updates in place, like DDP; DDP keeps one either way.
TEST(ServedVersionsTest, InPlaceUpdateKeepsOneVersion) {
  EXPECT_EQ(ServedVersions::Kept(/*holds_params=*/true, /*in_place_update=*/false), 2);
  EXPECT_EQ(ServedVersions::Kept(true, true), 1);
  EXPECT_EQ(ServedVersions::Kept(false, false), 1);
  EXPECT_EQ(ServedVersions::Kept(false, true), 1);
  ServedVersions v(ServedVersions::Kept(true, true), std::nullopt, 4, nullptr);
  EXPECT_EQ(v.kept(), 1);
  EXPECT_EQ(v.update_in(3), v.update_out(3)) << "in place";
  EXPECT_EQ(v.values(3), v.values(4));
  EXPECT_EQ(v.bytes(), 4 * 4);
  ServedVersions half(ServedVersions::Kept(true, true), HalfType::kBF16, 4, nullptr);
  EXPECT_EQ(half.served(3, 0), half.served(4, 0)) << "one half copy";
  EXPECT_EQ(half.bytes(), 4 * (4 + 2));
}

}  // namespace
}  // namespace tessel
