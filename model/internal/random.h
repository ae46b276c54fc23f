// Small, fixed pseudo-random generators for the demo model and data set.
//
// The standard <random> distributions are not specified bit for bit, so their
// output differs between standard libraries and versions. Everything here is
// fully specified: the same seed gives the same numbers on every platform
// (normals go through libm's log/sqrt/cos in double and are rounded to float by
// callers, so a last-place difference in libm practically never shows).
//
// Not thread-safe; each generator is owned by one thread.

#ifndef TESSEL_MODEL_INTERNAL_RANDOM_H_
#define TESSEL_MODEL_INTERNAL_RANDOM_H_

#include <cmath>
#include <cstdint>

namespace tessel::model::internal {

// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): one 64-bit add and a mix per draw, every seed
// valid.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) on a grid of 2^-24, so every value is an exact float.
  float UniformFloat() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }

  // Uniform in [0, 1) on a grid of 2^-53.
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, n), n > 0 (Lemire's multiply-high; the bias is at
  // most n / 2^64).
  uint64_t UniformInt(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

  // Standard normal by the Box-Muller transform; draws come in pairs and the
  // second one is kept for the next call.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - UniformDouble();  // (0, 1]: log(u1) is finite.
    const double u2 = UniformDouble();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 6.283185307179586 * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace tessel::model::internal

#endif  // TESSEL_MODEL_INTERNAL_RANDOM_H_
