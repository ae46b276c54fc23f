#include "core/digest.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace tessel {
namespace {
inline uint64_t Mix(uint64_t acc, uint64_t word) {
  acc ^= word * 0x87C37B91114253D5ull;
  acc = (acc << 31) | (acc >> 33);
  return acc * 0x4CF5AD432745937Full + 0x52DCE729;
}
}  // namespace

void Digest::Update(const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lanes_[l] = Mix(lanes_[l], w);
    }
  }
  for (; i < bytes; ++i) lanes_[i % 4] = Mix(lanes_[i % 4], p[i] | 0x100);
  length_ += bytes;
}

uint64_t Digest::value() const {
  uint64_t h = length_;
  for (uint64_t l : lanes_) h = Mix(h, l);
  h ^= h >> 29;
  return h;
}

std::string Digest::Hex() const { return absl::StrFormat("%016x", value()); }

}  // namespace tessel
