#include "core/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessel {

int64_t TopkCount(double ratio, int64_t n) {
  if (!(ratio > 0) || n <= 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  return std::clamp<int64_t>(static_cast<int64_t>(k), 1, n);
}

namespace {

// 256 bins counted in four interleaved copies, so that runs of keys in one
// bin (gradients share exponents) do not serialise on one counter.
struct Histogram {
  int64_t count[4][256] = {};
  void Add(size_t i, uint32_t bin) { ++count[i & 3][bin]; }
  int64_t Bin(int b) const { return count[0][b] + count[1][b] + count[2][b] + count[3][b]; }
};

// The highest bin whose entries, with those of the bins above it, reach
// `*need`; the entries above it are all taken, so *need drops by them.
int ChooseBin(const Histogram& h, int64_t* need, int64_t* in_bin) {
  int64_t above = 0;
  for (int b = 255; b > 0; --b) {
    const int64_t c = h.Bin(b);
    if (above + c >= *need) {
      *need -= above;
      *in_bin = c;
      return b;
    }
    above += c;
  }
  *need -= above;
  *in_bin = h.Bin(0);
  return 0;
}

}  // namespace

// A radix select over the keys (the CUDA kernel's algorithm, gpu/kernels.cu):
// four passes of 8 bits from the top find the k-th largest key T and how
// many entries equal to T to take (the lowest-indexed ones); one ordered scan
// then writes every entry above T and those, indices rising. The first pass
// also adds the gradient; a later pass reads every key until the candidates
// left (keys matching T's bits so far) are few, then collects them and the
// remaining passes read only those. O(n).
void TopkCompress(const float* grad, float* residual, int64_t n, int64_t k, uint8_t* wire) {
  if (n <= 0) return;
  Histogram h;
  for (int64_t i = 0; i < n; ++i) {
    residual[i] += grad[i];
    h.Add(static_cast<size_t>(i), TopkKey(residual[i]) >> 24);
  }
  if (k <= 0) return;
  int64_t need = k, in_bin = 0;
  uint32_t prefix = static_cast<uint32_t>(ChooseBin(h, &need, &in_bin)) << 24;
  thread_local std::vector<uint32_t> candidates;
  bool collected = false;
  for (int shift = 16; shift >= 0; shift -= 8) {
    const uint32_t fixed = ~0u << (shift + 8);  // T's bits chosen so far
    h = Histogram();
    if (!collected) {
      // Few enough to keep: collect them on the way.
      const bool collect = in_bin <= n / 16;
      if (collect) candidates.clear();
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t key = TopkKey(residual[i]);
        if ((key & fixed) != prefix) continue;
        h.Add(static_cast<size_t>(i), (key >> shift) & 255u);
        if (collect) candidates.push_back(static_cast<uint32_t>(i));
      }
      collected = collect;
    } else {
      size_t kept = 0;  // those still matching, in index order
      for (uint32_t i : candidates) {
        const uint32_t key = TopkKey(residual[i]);
        if ((key & fixed) != prefix) continue;
        h.Add(i, (key >> shift) & 255u);
        candidates[kept++] = i;
      }
      candidates.resize(kept);
    }
    prefix |= static_cast<uint32_t>(ChooseBin(h, &need, &in_bin)) << shift;
  }
  const uint32_t threshold = prefix;
  auto* index = reinterpret_cast<uint32_t*>(wire);
  auto* value = reinterpret_cast<float*>(wire + 4 * static_cast<size_t>(k));
  int64_t j = 0;
  for (int64_t i = 0; i < n && j < k; ++i) {
    const uint32_t key = TopkKey(residual[i]);
    if (key > threshold || (key == threshold && need > 0)) {
      if (key == threshold) --need;
      const uint32_t at = static_cast<uint32_t>(i);
      std::memcpy(index + j, &at, 4);
      std::memcpy(value + j, &residual[i], 4);
      residual[i] = 0.f;  // sent: nothing left over
      ++j;
    }
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
