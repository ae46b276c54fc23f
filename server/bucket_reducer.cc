#include "server/bucket_reducer.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/reduce.h"
#include "core/status_macros.h"
#include "core/topk.h"
#include "server/update_pool.h"

namespace tessel {
namespace {

int64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

}  // namespace

BucketReducer::BucketReducer(Options options)
    : world_(options.world),
      buckets_(std::move(options.buckets)),
      shard_elements_(options.shard_elements > 0 ? options.shard_elements
                      : buckets_.empty()         ? 0
                                                 : buckets_.back().end),
      half_(options.half),
      topk_ratio_(options.topk_ratio),
      fold_prefix_(options.fold_prefix) {
  const size_t nb = buckets_.size();
  const size_t w = static_cast<size_t>(world_);
  if (topk_ratio_ > 0) {
    sparse_offset_.push_back(0);
    for (const Range& b : buckets_) {
      sparse_offset_.push_back(sparse_offset_.back() +
                               SparseBytes(TopkCount(topk_ratio_, b.size())));
    }
    rank_sparse_.resize(w);
  }
  held_.resize(nb);
  for (auto& h : held_) h.resize(w);
  incoming_.resize(nb);
  for (auto& h : incoming_) h.resize(w);
  parts_.assign(nb, std::vector<uint8_t>(w, 0));
  spare_.resize(nb);
  borrowed_.assign(nb, std::vector<const void*>(w, nullptr));
  leases_.resize(nb);
  for (auto& l : leases_) l.resize(w);
  landed_.assign(nb, std::vector<uint8_t>(w, 0));
  landed_count_.assign(nb, 0);
  landed_prefix_.assign(nb, 0);
  folded_.assign(nb, 0);
  fold_queued_.assign(nb, 0);
  fold_running_.assign(nb, 0);
  summing_.assign(nb, 0);
}

void BucketReducer::set_fold_prefix(bool on) {
  absl::MutexLock lock(&mu_);
  fold_prefix_ = on;
}

uint64_t BucketReducer::push_bytes(int bucket) const {
  const int64_t n = buckets_[bucket].size();
  if (topk_ratio_ > 0) return SparseBytes(TopkCount(topk_ratio_, n));
  return static_cast<uint64_t>(n) * wire_bytes();
}

void* BucketReducer::Accept(int bucket, int rank, bool borrow) {
  absl::MutexLock lock(&mu_);
  if (topk_ratio_ > 0) {  // top-k pairs land in the rank's sparse buffer
    if (rank_sparse_[rank].empty()) rank_sparse_[rank].assign(sparse_offset_.back(), 0);
    if (borrow) return nullptr;
    return rank_sparse_[rank].data() + sparse_offset_[bucket];
  }
  if (parts_[bucket][rank]) {  // added to the parts: received beside them
    std::unique_ptr<float[]>& in = incoming_[bucket][rank];
    if (in == nullptr) in = TakeLocked(bucket);
    return in.get();
  }
  if (borrow) return nullptr;
  std::unique_ptr<float[]>& held = held_[bucket][rank];
  if (held == nullptr) held = TakeLocked(bucket);
  return held.get();
}

std::unique_ptr<float[]> BucketReducer::TakeLocked(int bucket) {
  std::vector<std::unique_ptr<float[]>>& spare = spare_[bucket];
  if (!spare.empty()) {
    std::unique_ptr<float[]> b = std::move(spare.back());
    spare.pop_back();
    return b;
  }
  const size_t floats = (static_cast<size_t>(buckets_[bucket].size()) * wire_bytes() + 3) / 4;
  pool_bytes_ += static_cast<int64_t>(floats * sizeof(float));
  return std::make_unique<float[]>(floats);
}

void* BucketReducer::AcceptPart(int bucket, int rank) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<float[]>& held = held_[bucket][rank];
  if (!parts_[bucket][rank]) {  // the first part is the sum so far
    if (held == nullptr) held = TakeLocked(bucket);
    return held.get();
  }
  std::unique_ptr<float[]>& in = incoming_[bucket][rank];
  if (in == nullptr) in = TakeLocked(bucket);
  return in.get();
}

void BucketReducer::LandPart(int bucket, int rank) {
  {
    absl::MutexLock lock(&mu_);
    if (!parts_[bucket][rank]) {
      parts_[bucket][rank] = 1;
      return;
    }
  }
  AddIncoming(bucket, rank);
}

bool BucketReducer::HasParts(int bucket, int rank) {
  absl::MutexLock lock(&mu_);
  return parts_[bucket][rank] != 0;
}

void BucketReducer::AddIncoming(int bucket, int rank) {
  float* sum;
  const float* in;
  {
    absl::MutexLock lock(&mu_);
    sum = held_[bucket][rank].get();
    in = incoming_[bucket][rank].get();
  }
  // Only this rank's frames of this bucket touch both buffers, one at a time.
  const int64_t n = buckets_[bucket].size();
  if (half_) {  // in the half type, as the rank's in-place add would
    AddHalfInto(*half_, reinterpret_cast<const uint16_t*>(in), reinterpret_cast<uint16_t*>(sum),
                static_cast<size_t>(n));
  } else {
    for (int64_t i = 0; i < n; ++i) sum[i] += in[i];
  }
  absl::MutexLock lock(&mu_);
  spare_[bucket].push_back(std::move(incoming_[bucket][rank]));
}

absl::StatusOr<BucketReducer::Landing> BucketReducer::Land(int bucket, int rank) {
  bool parts;
  {
    absl::MutexLock lock(&mu_);
    parts = parts_[bucket][rank] != 0;
  }
  if (parts) AddIncoming(bucket, rank);  // the push completes the rank's sum
  absl::MutexLock lock(&mu_);
  parts_[bucket][rank] = 0;
  if (topk_ratio_ > 0) {
    // The pairs are checked before they count.
    const int64_t n = buckets_[bucket].size();
    TESSEL_RETURN_IF_ERROR(CheckSparse(rank_sparse_[rank].data() + sparse_offset_[bucket],
                                       TopkCount(topk_ratio_, n), n));
  }
  return RecordLocked(bucket, rank);
}

BucketReducer::Landing BucketReducer::LandBorrowed(int bucket, int rank, const void* data,
                                                   std::shared_ptr<void> lease) {
  absl::MutexLock lock(&mu_);
  borrowed_[bucket][rank] = data;
  leases_[bucket][rank] = std::move(lease);
  return RecordLocked(bucket, rank);
}

BucketReducer::Landing BucketReducer::RecordLocked(int bucket, int rank) {
  Landing l;
  if (!landed_[bucket][rank]) {
    landed_[bucket][rank] = 1;
    ++landed_count_[bucket];
  }
  int& prefix = landed_prefix_[bucket];
  while (prefix < world_ && landed_[bucket][prefix]) ++prefix;
  if (landed_count_[bucket] == world_) {
    l.complete = true;
  } else if (fold_prefix_ && world_ >= 3 && topk_ratio_ == 0 && !fold_queued_[bucket] &&
             prefix >= 2 && prefix > folded_[bucket]) {
    if (acc_.empty()) acc_.assign(static_cast<size_t>(shard_elements_), 0.f);
    fold_queued_[bucket] = 1;
    l.fold = true;
  }
  return l;
}

void BucketReducer::LandedLocked(int bucket, std::vector<const void*>* landed) const {
  landed->resize(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    const void* b = borrowed_[bucket][r];
    (*landed)[r] = b != nullptr ? b : held_[bucket][r].get();
  }
}

void BucketReducer::ReturnBuffersLocked(int bucket, int from, int to) {
  for (int r = from; r < to; ++r) {
    std::unique_ptr<float[]>& held = held_[bucket][r];
    if (held != nullptr) spare_[bucket].push_back(std::move(held));
  }
}

const float* BucketReducer::RankChunk(int r, const std::vector<const void*>& landed,
                                      size_t bucket_at, size_t off, size_t n,
                                      float* scratch) const {
  const void* src = static_cast<const char*>(landed[r]) + (off - bucket_at) * wire_bytes();
  if (!half_) return static_cast<const float*>(src);
  HalfToFloat(*half_, static_cast<const uint16_t*>(src), scratch, n);
  return scratch;
}

int BucketReducer::ChunkSources(const std::vector<const void*>& landed, size_t bucket_at,
                                size_t off, size_t n, bool with_acc, int from, int to,
                                std::vector<float>* widened,
                                std::vector<const float*>* srcs) const {
  const size_t ranks = static_cast<size_t>(to - from);
  if (half_ && widened->size() < ranks * n) widened->resize(ranks * n);
  srcs->clear();
  if (with_acc) srcs->push_back(acc_.data() + off);
  for (int r = from; r < to; ++r) {
    float* scratch = half_ ? widened->data() + static_cast<size_t>(r - from) * n : nullptr;
    srcs->push_back(RankChunk(r, landed, bucket_at, off, n, scratch));
  }
  return static_cast<int>(srcs->size());
}

BucketReducer::Folded BucketReducer::Fold(int bucket) {
  const Range br = buckets_[bucket];
  const size_t bucket_at = static_cast<size_t>(br.begin);
  const int64_t chunk = half_ ? kWidenChunk : br.size();
  thread_local std::vector<const void*> landed;
  thread_local std::vector<float> widened;
  thread_local std::vector<const float*> srcs;
  Folded done;
  for (;;) {
    int from;
    int to;
    {
      absl::MutexLock lock(&mu_);
      from = folded_[bucket];
      to = landed_prefix_[bucket];
      // Nothing new in order, or the bucket is complete (its sum adds the
      // rest), or another fold of it runs (and will look again).
      if (fold_running_[bucket] || summing_[bucket] || landed_count_[bucket] == world_ ||
          to <= std::max(from, 1)) {
        if (!fold_running_[bucket]) fold_queued_[bucket] = 0;
        return done;
      }
      fold_running_[bucket] = 1;
      LandedLocked(bucket, &landed);
    }
    const auto started = std::chrono::steady_clock::now();
    // acc_ = rank 0 + rank 1 + ... (from == 0), or acc_ + rank from + ...:
    // the left-to-right sum SumChunks would have started with.
    for (int64_t c = br.begin; c < br.end; c += chunk) {
      const size_t off = static_cast<size_t>(c);
      const size_t n = static_cast<size_t>(std::min(br.end, c + chunk) - c);
      const int count =
          ChunkSources(landed, bucket_at, off, n, /*with_acc=*/from > 0, from, to, &widened, &srcs);
      ReduceSum(srcs.data(), count, acc_.data() + off, n);
    }
    done.us += MicrosSince(started);
    done.pushes += to - from;
    absl::MutexLock lock(&mu_);
    ReturnBuffersLocked(bucket, from, to);  // summed: free for other pushes
    folded_[bucket] = to;
    fold_running_[bucket] = 0;
  }
}

void BucketReducer::BeginSum(int bucket) {
  absl::MutexLock lock(&mu_);
  // A fold of this bucket that already started ends first (it is bounded
  // work that waits for nothing); one that has not started will not.
  summing_[bucket] = 1;
  std::pair<BucketReducer*, int> arg{this, bucket};
  mu_.Await(absl::Condition(
      +[](std::pair<BucketReducer*, int>* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->first->mu_) {
        return a->first->fold_running_[a->second] == 0;
      },
      &arg));
}

void BucketReducer::SumChunks(int bucket, const ChunkFn& fn) {
  thread_local std::vector<const void*> landed_here;
  thread_local std::vector<const uint8_t*> sparse;
  int folded;
  {
    absl::MutexLock lock(&mu_);
    LandedLocked(bucket, &landed_here);
    folded = folded_[bucket];
    sparse.clear();
    for (const std::vector<uint8_t>& s : rank_sparse_) sparse.push_back(s.data());
  }
  // This thread's list, read by the pool's threads too (a thread_local named in
  // the lambdas below would be each thread's own).
  const std::vector<const void*>& landed = landed_here;
  const Range br = buckets_[bucket];
  const size_t bucket_at = static_cast<size_t>(br.begin);
  const int64_t chunk = half_ ? kWidenChunk : br.size();
  const int64_t topk = TopkCount(topk_ratio_, br.size());
  if (br.size() == 0) return;
  if (topk > 0) {  // each rank's pairs, densified (one chunk: the bucket)
    thread_local std::vector<float> dense;
    thread_local std::vector<const float*> dense_srcs;
    const size_t n = static_cast<size_t>(br.size());
    if (dense.size() < static_cast<size_t>(world_) * n) dense.resize(world_ * n);
    dense_srcs.resize(static_cast<size_t>(world_));
    for (int r = 0; r < world_; ++r) {
      float* to = dense.data() + static_cast<size_t>(r) * n;
      Densify(sparse[r] + sparse_offset_[bucket], topk, to, static_cast<int64_t>(n));
      dense_srcs[r] = to;
    }
    fn(br, dense_srcs.data(), world_);
    return;
  }
  // Ranks [0, folded) are summed in acc_ already: the sources are acc_ and
  // ranks folded..W-1.
  const int first = folded >= 2 ? folded : 0;
  const auto sum_range = [&](int64_t from, int64_t to) {
    thread_local std::vector<float> widened;
    thread_local std::vector<const float*> srcs;
    for (int64_t c = from; c < to; c += chunk) {
      const Range part{c, std::min(to, c + chunk)};
      ChunkSources(landed, bucket_at, static_cast<size_t>(part.begin),
                   static_cast<size_t>(part.size()), /*with_acc=*/first > 0, first, world_,
                   &widened, &srcs);
      fn(part, srcs.data(), static_cast<int>(srcs.size()));
    }
  };
  // Half pushes are widened and summed chunk by chunk: a large bucket's
  // chunks go over the compute thread's pool (an fp32 bucket is one chunk,
  // which the update rule splits itself).
  UpdatePool* pool = UpdatePool::Current();
  const size_t size = static_cast<size_t>(br.size());
  if (half_ && pool != nullptr && pool->threads() > 1 && size >= 2 * UpdatePool::kMinChunk) {
    pool->ParallelFor(size, UpdatePool::kMinChunk, [&](size_t b, size_t e) {
      sum_range(br.begin + static_cast<int64_t>(b), br.begin + static_cast<int64_t>(e));
    });
    return;
  }
  sum_range(br.begin, br.end);
}

std::vector<std::shared_ptr<void>> BucketReducer::EndSum(int bucket) {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<void>> released;
  folded_[bucket] = 0;
  summing_[bucket] = 0;
  ReturnBuffersLocked(bucket, 0, world_);
  std::fill(parts_[bucket].begin(), parts_[bucket].end(), 0);
  fold_queued_[bucket] = 0;
  std::fill(landed_[bucket].begin(), landed_[bucket].end(), 0);
  landed_count_[bucket] = 0;
  landed_prefix_[bucket] = 0;
  // The borrowed pushes are read: back to their workers.
  std::fill(borrowed_[bucket].begin(), borrowed_[bucket].end(), nullptr);
  for (std::shared_ptr<void>& lease : leases_[bucket]) {
    // A lease may own a null pointer (only its deleter matters): test the
    // count, not the pointer.
    if (lease.use_count() > 0) released.push_back(std::move(lease));
    lease.reset();
  }
  return released;
}

int64_t BucketReducer::Abandon(int rank, const std::vector<int>& buckets) {
  absl::MutexLock lock(&mu_);
  if (buckets.empty()) return 0;
  if (topk_ratio_ > 0) {
    // The rank's pairs of every bucket share one buffer: those that landed
    // go on in a copy, and the transport keeps the old one to write into.
    std::vector<uint8_t>& sparse = rank_sparse_[rank];
    if (sparse.empty()) return 0;
    std::vector<uint8_t> copy(sparse);
    const int64_t bytes = static_cast<int64_t>(sparse.size());
    retired_sparse_.push_back(std::move(sparse));  // moved: its storage stays where it was
    sparse = std::move(copy);
    retired_bytes_ += bytes;
    return bytes;
  }
  int64_t retired = 0;
  for (int bucket : buckets) {
    // Where Accept (or AcceptPart) put the receive: beside the rank's parts,
    // or its held buffer (a borrowed push has none).
    std::unique_ptr<float[]>& buffer =
        parts_[bucket][rank] ? incoming_[bucket][rank] : held_[bucket][rank];
    if (buffer == nullptr) continue;
    const int64_t bytes = static_cast<int64_t>(
        (static_cast<size_t>(buckets_[bucket].size()) * wire_bytes() + 3) / 4 * sizeof(float));
    retired_.push_back(std::move(buffer));
    pool_bytes_ -= bytes;
    retired += bytes;
  }
  retired_bytes_ += retired;
  return retired;
}

int64_t BucketReducer::buffer_bytes() {
  absl::MutexLock lock(&mu_);
  int64_t bytes = pool_bytes_ + retired_bytes_;
  for (const auto& g : rank_sparse_) bytes += static_cast<int64_t>(g.size());
  bytes += static_cast<int64_t>(acc_.size() * sizeof(float));
  return bytes;
}

int64_t BucketReducer::retired_bytes() {
  absl::MutexLock lock(&mu_);
  return retired_bytes_;
}

}  // namespace tessel
