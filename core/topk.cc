#include "core/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessel {

int64_t TopkCount(double ratio, int64_t n) {
  if (!(ratio > 0) || n <= 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  return std::clamp<int64_t>(static_cast<int64_t>(k), 1, n);
}

void TopkCompress(const float* grad, float* residual, int64_t n, int64_t k, uint8_t* wire) {
  thread_local std::vector<uint32_t> order;
  order.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) residual[i] += grad[i];
  std::iota(order.begin(), order.end(), 0u);
  // Larger magnitude first; the lower index wins a tie (deterministic). The
  // magnitude is compared as the bits of |v|, which order like the floats
  // and also rank NaN (above infinity), so the order is total (a float
  // comparison with NaN is not a strict weak order) and the CUDA kernel's
  // integer radix select picks the same entries (gpu/kernels.cu).
  auto before = [residual](uint32_t a, uint32_t b) {
    const uint32_t x = TopkKey(residual[a]), y = TopkKey(residual[b]);
    return x > y || (x == y && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), before);
  std::sort(order.begin(), order.begin() + k);
  auto* index = reinterpret_cast<uint32_t*>(wire);
  auto* value = reinterpret_cast<float*>(wire + 4 * static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    const uint32_t i = order[static_cast<size_t>(j)];
    std::memcpy(index + j, &i, 4);
    std::memcpy(value + j, &residual[i], 4);
    residual[i] = 0.f;  // sent: nothing left over
  }
}

absl::Status CheckSparse(const uint8_t* wire, int64_t k, int64_t n) {
  int64_t previous = -1;
  for (int64_t j = 0; j < k; ++j) {
    uint32_t i;
    std::memcpy(&i, wire + 4 * static_cast<size_t>(j), 4);
    if (static_cast<int64_t>(i) <= previous || static_cast<int64_t>(i) >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "top-k push: index ", i, " at position ", j, " of ", k,
          static_cast<int64_t>(i) >= n ? absl::StrCat(" is outside the bucket's ", n, " elements")
                                       : " does not rise (indices must rise strictly)"));
    }
    previous = i;
  }
  return absl::OkStatus();
}

void Densify(const uint8_t* wire, int64_t k, float* dense, int64_t n) {
  std::fill(dense, dense + n, 0.f);
  const uint8_t* value = wire + 4 * static_cast<size_t>(k);
  for (int64_t j = 0; j < k; ++j) {
    uint32_t i;
    std::memcpy(&i, wire + 4 * static_cast<size_t>(j), 4);
    std::memcpy(dense + i, value + 4 * static_cast<size_t>(j), 4);
  }
}

}  // namespace tessel
