#include "core/precision.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessel {
namespace {

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

TEST(PrecisionTest, KnownF16Values) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3C00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToF16(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7C00);  // ties to even: overflows to inf
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);  // halfway, even is 0
  EXPECT_EQ(FloatToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToF16(0.1f), 0x2E66);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToF16(std::nanf("")) & 0x7E00, 0x7E00);
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
}

TEST(PrecisionTest, KnownBF16Values) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBF16(3.14159265f), 0x4049);
  EXPECT_EQ(FloatToBF16(FromBits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(FloatToBF16(FromBits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(FloatToBF16(FromBits(0x7F7FFFFF)), 0x7F80);  // overflows to inf
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::nanf("")))));
}

// Every half value converts to float and back to itself, and the vector
// paths give the scalar definition's bits.
TEST(PrecisionTest, ExhaustiveRoundTripAndVectorPathsAgree) {
  for (HalfType t : {HalfType::kF16, HalfType::kBF16}) {
    std::vector<uint16_t> all(65536), back(65536);
    for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    HalfToFloat(t, all.data(), f.data(), all.size());
    FloatToHalf(t, f.data(), back.data(), f.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      const float scalar = t == HalfType::kF16 ? F16ToFloat(all[i]) : BF16ToFloat(all[i]);
      ASSERT_EQ(Bits(f[i]), Bits(scalar)) << std::hex << i;
      if (!std::isnan(f[i])) {
        ASSERT_EQ(back[i], all[i]) << std::hex << i;
      } else {
        ASSERT_TRUE(t == HalfType::kF16 ? (back[i] & 0x7C00) == 0x7C00 && (back[i] & 0x3FF)
                                        : (back[i] & 0x7F80) == 0x7F80 && (back[i] & 0x7F))
            << std::hex << i;
      }
    }
  }
}

TEST(PrecisionTest, RandomFloatsRoundToNearestEvenOnEveryPath) {
  std::mt19937 rng(1);
  std::vector<float> in(100003);
  for (float& v : in) v = FromBits(static_cast<uint32_t>(rng()));
  for (size_t i = 0; i < 1000; ++i)
    in[i] = std::ldexp(static_cast<float>(rng() % 4096), -30 + static_cast<int>(i % 60));
  for (HalfType t : {HalfType::kF16, HalfType::kBF16}) {
    std::vector<uint16_t> vec(in.size());
    FloatToHalf(t, in.data(), vec.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t scalar = t == HalfType::kF16 ? FloatToF16(in[i]) : FloatToBF16(in[i]);
      ASSERT_EQ(vec[i], scalar) << i << " " << in[i];
      if (std::isnan(in[i]) || std::isinf(in[i])) continue;
      // Nearest: no other half value is closer (checked through the neighbours).
      const double x = in[i];
      auto value = [&](uint16_t h) {
        return static_cast<double>(t == HalfType::kF16 ? F16ToFloat(h) : BF16ToFloat(h));
      };
      const double got = value(scalar);
      if (std::isinf(got)) continue;
      for (int d : {-1, 1}) {
        const uint16_t nb = static_cast<uint16_t>(scalar + d);
        const double other = value(nb);
        if (std::isnan(other) || std::isinf(other) || std::signbit(other) != std::signbit(got)) {
          continue;
        }
        ASSERT_LE(std::fabs(got - x), std::fabs(other - x)) << i << " " << in[i];
      }
    }
  }
}

// The in-place half add rounds once, to nearest even, as torch's
// `grad += g` in bf16/fp16 does.
TEST(PrecisionTest, AddHalfIntoRoundsTheSumOnceToNearestEven) {
  auto add = [](HalfType t, float a, float b) {
    uint16_t acc = t == HalfType::kF16 ? FloatToF16(a) : FloatToBF16(a);
    const uint16_t src = t == HalfType::kF16 ? FloatToF16(b) : FloatToBF16(b);
    AddHalfInto(t, &src, &acc, 1);
    return t == HalfType::kF16 ? F16ToFloat(acc) : BF16ToFloat(acc);
  };
  // bf16 has 8 significant bits: an ulp of 1 is 2^-7.
  EXPECT_EQ(add(HalfType::kBF16, 1.f, std::ldexp(1.f, -9)), 1.f);  // a quarter ulp
  EXPECT_EQ(add(HalfType::kBF16, 1.f, std::ldexp(1.f, -8)), 1.f);  // a tie: even
  EXPECT_EQ(add(HalfType::kBF16, 1.f + std::ldexp(1.f, -7), std::ldexp(1.f, -8)),
            1.f + std::ldexp(1.f, -6));  // a tie: even, up
  EXPECT_EQ(add(HalfType::kBF16, 3.f, -1.f), 2.f);
  // fp16 has 11: 2048 + 1 is a tie.
  EXPECT_EQ(add(HalfType::kF16, 2048.f, 1.f), 2048.f);
  EXPECT_EQ(add(HalfType::kF16, 2050.f, 1.f), 2052.f);
  EXPECT_TRUE(std::isinf(add(HalfType::kF16, 65504.f, 65504.f)));

  // Random halves (n not a multiple of any block): every element is the
  // scalar definition, and for fp16 (whose sums are exact in double) the
  // half nearest the exact sum.
  std::mt19937 rng(7);
  const size_t n = 1003;
  for (HalfType t : {HalfType::kF16, HalfType::kBF16}) {
    std::vector<uint16_t> acc(n), src(n);
    for (size_t i = 0; i < n; ++i) {
      acc[i] = static_cast<uint16_t>(rng() & 0x7bff) ^ static_cast<uint16_t>(rng() & 0x8000);
      src[i] = static_cast<uint16_t>(rng() & 0x7bff) ^ static_cast<uint16_t>(rng() & 0x8000);
      if (t == HalfType::kBF16) {  // finite bf16: exponent below all ones
        acc[i] &= 0xbf7f;
        src[i] &= 0xbf7f;
      }
    }
    std::vector<uint16_t> got = acc;
    AddHalfInto(t, src.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (t == HalfType::kBF16) {
        ASSERT_EQ(got[i], FloatToBF16(BF16ToFloat(acc[i]) + BF16ToFloat(src[i]))) << i;
        continue;
      }
      ASSERT_EQ(got[i], FloatToF16(F16ToFloat(acc[i]) + F16ToFloat(src[i]))) << i;
      const double exact = static_cast<double>(F16ToFloat(acc[i])) + F16ToFloat(src[i]);
      const double value = F16ToFloat(got[i]);
      if (std::isinf(value)) continue;
      for (int d : {-1, 1}) {
        const double other = F16ToFloat(static_cast<uint16_t>(got[i] + d));
        if (std::isnan(other) || std::isinf(other) || std::signbit(other) != std::signbit(value)) {
          continue;
        }
        ASSERT_LE(std::fabs(value - exact), std::fabs(other - exact)) << i;
      }
    }
  }
}

}  // namespace
}  // namespace tessel
