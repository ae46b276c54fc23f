#include "server/served_versions.h"

#include <utility>

namespace tessel {

ServedVersions::ServedVersions(int kept, std::optional<HalfType> half, size_t n,
                               std::shared_ptr<PayloadMemory> memory)
    : kept_(kept == 2 ? 2 : 1), half_(half), n_(n) {
  // fp32 serves its masters: `kept` of them. Mixed precision serves the
  // half copy (`kept` of them) of masters updated in place.
  fp32_kept_ = !half ? kept_ : 1;
  const int half_kept = half ? kept_ : 0;
  for (int i = 0; i < fp32_kept_; ++i) {
    fp32_[i] = PayloadVector<float>(PayloadAllocator<float>(memory));
    fp32_[i].assign(n, 0.f);
  }
  for (int i = 0; i < half_kept; ++i) {
    half_copy_[i] = PayloadVector<uint16_t>(PayloadAllocator<uint16_t>(memory));
    half_copy_[i].assign(n, 0);
  }
}

int64_t ServedVersions::BytesPerElement(int kept, bool half) {
  const int64_t fp32 = half ? 1 : kept;
  return fp32 * int64_t{4} + (half ? kept * int64_t{2} : 0);
}

int64_t ServedVersions::bytes() const {
  return BytesPerElement(kept_, half_.has_value()) * static_cast<int64_t>(n_);
}

const void* ServedVersions::served(int64_t version, int64_t offset) const {
  if (half_) return half_copy_[BufferFor(version, kept())].data() + offset;
  return values(version) + offset;
}

void ServedVersions::RefreshHalf(int64_t version, size_t offset, size_t n) {
  if (!half_) return;
  FloatToHalf(*half_, values(version) + offset,
              half_copy_[BufferFor(version, kept())].data() + offset, n);
}

}  // namespace tessel
