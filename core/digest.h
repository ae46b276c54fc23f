// Digest of a server's state, for "state unchanged" checks and checkpoints.
//
// Stable across processes and builds (no per-process seeding), order
// sensitive, 64-bit. Not cryptographic: it detects change, not tampering.
//
// Example:
//   Digest d;
//   d.Update(params.data(), params.size() * sizeof(float));
//   d.UpdateInt(step);
//   std::string hex = d.Hex();
#ifndef TESSEL_CORE_DIGEST_H_
#define TESSEL_CORE_DIGEST_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessel {

class Digest {
 public:
  void Update(const void* data, size_t bytes);
  void UpdateInt(int64_t v) { Update(&v, sizeof(v)); }
  uint64_t value() const;
  std::string Hex() const;

 private:
  // Four independent lanes over 8-byte words make it ~4 GB/s; they are folded at the end.
  uint64_t lanes_[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull,
                        0x27D4EB2F165667C5ull};
  uint64_t length_ = 0;
};

}  // namespace tessel

#endif  // TESSEL_CORE_DIGEST_H_
