#include "core/layout.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tessel {

absl::Status ValidateJobName(absl::string_view job) {
  if (job.empty() || job.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("job name must be 1 to 128 characters, got ", job.size()));
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  bool ok = alnum(job[0]);
  for (char c : job) ok = ok && (alnum(c) || c == '.' || c == '_' || c == '~' || c == '-');
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job name '", absl::CHexEscape(job),
        "' may hold only letters, digits, '.', '_', '~' and '-', starting with a letter or digit "
        "(it names checkpoint folders and registry groups)"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> SplitAligned(int64_t n, int parts, int64_t align) {
  // Work in alignment units so boundaries are aligned; spread the remainder
  // one unit at a time over the last shards. The final unit may be partial, so
  // giving the extra units to the last shards keeps every size within one
  // unit of every other. With fewer units than parts, the first parts get one
  // unit each and the last are empty: part 0 always holds elements (shard 0
  // writes the checkpoint manifest, layout.h).
  const int64_t units = (n + align - 1) / align;
  const int64_t base = units / parts;
  const int64_t extra = units % parts;
  std::vector<int64_t> bounds(parts + 1);
  int64_t unit = 0;
  for (int s = 0; s < parts; ++s) {
    bounds[s] = std::min(unit * align, n);
    const bool gets_extra = base == 0 ? s < extra : s >= parts - extra;
    unit += base + (gets_extra ? 1 : 0);
  }
  bounds[parts] = n;
  return bounds;
}

absl::StatusOr<Layout> Layout::Create(const std::vector<TensorDesc>& tensors, int num_shards,
                                      int64_t align_elems, int64_t bucket_elems,
                                      std::vector<int64_t> cut_points) {
  if (tensors.empty()) return absl::InvalidArgumentError("layout has no tensors");
  if (num_shards < 1 || num_shards > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be in [1, ", kMaxShards, "], got ", num_shards));
  }
  if (align_elems < 1 || align_elems > kMaxParams) {
    return absl::InvalidArgumentError(
        absl::StrCat("align_elems must be in [1, ", kMaxParams, "], got ", align_elems));
  }
  if (bucket_elems < align_elems || bucket_elems % align_elems != 0) {
    return absl::InvalidArgumentError(absl::StrCat("bucket_elems (", bucket_elems,
                                                   ") must be a positive multiple of align_elems (",
                                                   align_elems, ")"));
  }
  Layout layout;
  layout.align_elems_ = align_elems;
  layout.bucket_elems_ = bucket_elems;
  absl::flat_hash_set<std::string> names;
  int64_t offset = 0;
  for (const TensorDesc& t : tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name, "' appears twice"));
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has a negative dimension ", d));
      }
      if (d != 0 && numel > kMaxParams / d) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", t.name, "' has more than ", kMaxParams, " elements"));
      }
      numel *= d;
    }
    if (offset > kMaxParams - numel) {
      return absl::InvalidArgumentError(
          absl::StrCat("layout has more than ", kMaxParams, " elements"));
    }
    layout.tensors_.push_back(TensorSlot{t.name, t.shape, offset, numel});
    offset += numel;
  }
  if (offset == 0) return absl::InvalidArgumentError("layout has zero elements");
  layout.num_params_ = offset;
  // Upper bound on the bucket count, before anything is allocated for it.
  if (offset / bucket_elems + num_shards + static_cast<int64_t>(cut_points.size()) > kMaxBuckets) {
    return absl::InvalidArgumentError(absl::StrCat(offset, " parameters in buckets of ",
                                                   bucket_elems, " elements make more than ",
                                                   kMaxBuckets, " buckets; use larger buckets"));
  }
  layout.shard_begin_ = SplitAligned(offset, num_shards, align_elems);
  std::sort(cut_points.begin(), cut_points.end());
  for (int64_t c : cut_points) {
    if (c < 0 || c > offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("cut point ", c, " is outside [0, ", offset, "]"));
    }
  }
  layout.bucket_begin_.resize(num_shards);
  for (int s = 0; s < num_shards; ++s) {
    const int64_t end = layout.shard_begin_[s + 1];
    std::vector<int64_t>& starts = layout.bucket_begin_[s];
    int64_t pos = layout.shard_begin_[s];
    auto cut = std::upper_bound(cut_points.begin(), cut_points.end(), pos);
    while (pos < end) {
      starts.push_back(pos);
      int64_t next = std::min(end, pos + bucket_elems);
      while (cut != cut_points.end() && *cut <= pos) ++cut;
      if (cut != cut_points.end() && *cut < next) next = *cut;
      pos = next;
    }
    starts.push_back(end);
  }
  return layout;
}

Range Layout::shard_range(int shard) const {
  return Range{shard_begin_[shard], shard_begin_[shard + 1]};
}

int Layout::num_buckets(int shard) const {
  return static_cast<int>(bucket_begin_[shard].size()) - 1;
}

Range Layout::bucket_range(int shard, int bucket) const {
  return Range{bucket_begin_[shard][bucket], bucket_begin_[shard][bucket + 1]};
}

int Layout::BucketOf(int shard, int64_t index) const {
  const std::vector<int64_t>& starts = bucket_begin_[shard];
  return static_cast<int>(std::upper_bound(starts.begin(), starts.end() - 1, index) -
                          starts.begin()) -
         1;
}

std::pair<int, int> Layout::BucketsIn(int shard, Range r) const {
  const std::vector<int64_t>& starts = bucket_begin_[shard];
  const int n = num_buckets(shard);
  // First bucket ending after r.begin, through the last starting before r.end.
  int first = static_cast<int>(std::upper_bound(starts.begin(), starts.end() - 1, r.begin) -
                               starts.begin()) -
              1;
  first = std::max(first, 0);
  int last =
      static_cast<int>(std::lower_bound(starts.begin(), starts.end() - 1, r.end) - starts.begin());
  if (n == 0 || r.empty()) return {0, 0};
  if (first < n && starts[first + 1] <= r.begin) ++first;
  return {first, std::max(0, std::min(last, n) - first)};
}

int Layout::ShardOf(int64_t index) const {
  // Last boundary <= index whose range is non-empty.
  auto it = std::upper_bound(shard_begin_.begin(), shard_begin_.end() - 1, index);
  int s = static_cast<int>(it - shard_begin_.begin()) - 1;
  while (s > 0 && shard_range(s).empty()) --s;
  return s;
}

int Layout::FindTensor(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace tessel
