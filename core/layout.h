// Layout: how a job's tensors map onto one flat parameter vector, and how that
// vector is cut into shard ranges and data-path buckets.
//
// Contract:
//   - Tensors are packed in registration order; tensor i occupies
//     [offset, offset + numel) of the flat vector. A tensor may straddle two
//     shard ranges.
//   - The flat vector of P elements is cut into S contiguous ranges that cover
//     [0, P) exactly. Range boundaries are multiples of `align_elems` (except the
//     final end, which is P), and range sizes differ by at most one alignment
//     unit, so shards are balanced. When P has fewer alignment units than S, the
//     last ranges are empty; range 0 never is (P >= 1).
//   - A shard whose range is empty (shard_empty) holds none of the job's
//     state and takes no part in its steps: no data frame and no step-bound
//     call (optimizer settings, skipped tensors, checkpoint requests, state
//     reads) goes to it, its step is not the job's, and shard 0 writes its
//     empty checkpoint part (ShardSnapshot::empty_shards). This is the one
//     rule for jobs smaller than one alignment unit per shard (a parameter
//     group of biases on several servers); shard 0, which holds elements,
//     keeps its roles (the manifest, the job's step for UnderWay).
//   - Each range is cut into buckets of `bucket_elems` elements (the last one
//     may be shorter). Buckets never cross a range boundary, nor a cut point
//     (optional element offsets, e.g. where FSDP units begin), so every
//     bucket lies inside one unit.
//   - Everything is a pure function of (tensors, S, align, bucket): every
//     process derives identical ranges, and a checkpoint can record and
//     re-derive them for another S.
//
// Example:
//   absl::StatusOr<Layout> layout = Layout::Create(
//       {{"fc0.weight", {256, 64}}, {"fc0.bias", {256}}}, /*num_shards=*/2,
//       /*align_elems=*/64, /*bucket_elems=*/1 << 20);
//   Range r = layout->shard_range(1);  // elements server 1 owns
#ifndef TESSEL_CORE_LAYOUT_H_
#define TESSEL_CORE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessel {

// The largest world (data-parallel workers) a job may have.
inline constexpr int kMaxWorldSize = 4096;

// A job's name names its checkpoint folder, its registry group and its
// metrics: 1 to 128 characters, letters, digits, '.', '_', '~' and '-',
// starting with a letter or digit. InvalidArgument saying so otherwise.
absl::Status ValidateJobName(absl::string_view job);

struct TensorDesc {
  std::string name;
  std::vector<int64_t> shape;
};

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  // Some element of one lies inside the other (an empty range inside `o`'s
  // span counts).
  bool Overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
  friend bool operator==(const Range& a, const Range& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // first element in the flat vector
  int64_t numel = 0;
  Range range() const { return Range{offset, offset + numel}; }
};

// Half-open element range [begin, end).

class Layout {
 public:
  // Upper bounds that keep every product in int64 and every count sane.
  static constexpr int kMaxShards = 4096;
  // Buckets of the whole layout; more means bucket_bytes is far too small.
  static constexpr int64_t kMaxBuckets = int64_t{1} << 22;
  static constexpr int64_t kMaxParams = int64_t{1} << 40;

  // Fails with InvalidArgument on: no tensors, empty or duplicate names,
  // negative dimensions, zero-element model, more than kMaxParams elements,
  // num_shards outside [1, kMaxShards], align_elems < 1, or bucket_elems not a
  // positive multiple of align_elems.
  static absl::StatusOr<Layout> Create(const std::vector<TensorDesc>& tensors, int num_shards,
                                       int64_t align_elems, int64_t bucket_elems,
                                       std::vector<int64_t> cut_points = {});

  int64_t num_params() const { return num_params_; }
  int num_shards() const { return static_cast<int>(shard_begin_.size()) - 1; }
  int64_t align_elems() const { return align_elems_; }
  int64_t bucket_elems() const { return bucket_elems_; }
  const std::vector<TensorSlot>& tensors() const { return tensors_; }

  Range shard_range(int shard) const;
  // The shard holds no element, so takes no part in the job's steps (see the
  // contract above). Never true of shard 0.
  bool shard_empty(int shard) const { return shard_range(shard).empty(); }
  int num_buckets(int shard) const;
  // Absolute element range of bucket `bucket` of shard `shard`.
  Range bucket_range(int shard, int bucket) const;
  // Shard owning element `index` (0 <= index < num_params()).
  int ShardOf(int64_t index) const;
  // Index of a tensor by name, or -1.
  int FindTensor(const std::string& name) const;
  // Bucket of `shard` holding element `index` (inside the shard's range).
  int BucketOf(int shard, int64_t index) const;
  // Buckets of `shard` inside element range `r`: [first, first + count).
  // With `r` between cut points this is exactly the buckets covering r there.
  std::pair<int, int> BucketsIn(int shard, Range r) const;

 private:
  Layout() = default;

  std::vector<TensorSlot> tensors_;
  std::vector<int64_t> shard_begin_;                // S + 1 boundaries; shard_begin_[S] == P
  std::vector<std::vector<int64_t>> bucket_begin_;  // per shard: bucket starts + range end
  int64_t num_params_ = 0;
  int64_t align_elems_ = 1;
  int64_t bucket_elems_ = 1;
};

// Balanced aligned split of [0, n) into `parts` ranges; the building block of
// Layout, exposed for tests and for re-sharding. Returns parts + 1 boundaries.
std::vector<int64_t> SplitAligned(int64_t n, int parts, int64_t align);

}  // namespace tessel

#endif  // TESSEL_CORE_LAYOUT_H_
