#include "server/shard_job.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/digest.h"
#include "core/reduce.h"
#include "core/topk.h"
#include "rpc/job_spec.h"

namespace tessel {
namespace {
// Mixed precision: elements of each rank's gradient widened to fp32 at a
// time (64 KiB per rank: the chunk stays in cache for the reduction).
constexpr int64_t kWidenChunk = 16384;
}  // namespace

absl::StatusOr<std::unique_ptr<ShardJob>> ShardJob::Create(const v1::JobSpec& spec, int shard_index,
                                                           int64_t epoch,
                                                           std::shared_ptr<PayloadMemory> memory) {
  auto layout = ValidateJobSpec(spec);
  if (!layout.ok()) return layout.status();
  if (shard_index < 0 || shard_index >= spec.num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat("job '", spec.job(), "': shard_index ",
                                                   shard_index, " is outside [0, ",
                                                   spec.num_shards(), ")"));
  }
  if (epoch < 0) return absl::InvalidArgumentError("epoch must be >= 0");
  auto optimizer = OptimizerFromProto(spec.optimizer());
  if (!optimizer.ok()) return optimizer.status();
  // Refuse, rather than die allocating, a job this machine cannot hold: its
  // masters, state and per-rank receive buffers must fit in half the memory.
  const double range = static_cast<double>(layout->shard_range(shard_index).size());
  const double need = range * (4.0 * (1 + StateSlots(*optimizer)) + 4.0 * spec.world_size());
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (have > 0 && need > have / 2) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job '", spec.job(), "' shard ", shard_index, " needs about ",
                     static_cast<int64_t>(need / (1 << 20)), " MiB; this server has ",
                     static_cast<int64_t>(have / (1 << 20)),
                     " MiB of memory: use more shard servers (smaller ranges) or fewer workers"));
  }
  return std::unique_ptr<ShardJob>(
      new ShardJob(spec, std::move(*layout), shard_index, epoch, *optimizer, std::move(memory)));
}

absl::StatusOr<std::unique_ptr<ShardJob>> ShardJob::Restore(const v1::JobSpec& spec,
                                                            int shard_index, int64_t epoch,
                                                            const Manifest& manifest,
                                                            Checkpointer* checkpointer,
                                                            std::shared_ptr<PayloadMemory> memory) {
  if (spec.strategy() == v1::STRATEGY_DDP) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", spec.job(),
                     "': DDP keeps parameters and optimizer state on the workers; "
                     "shard-server checkpoints cover zero1 and zero2 jobs"));
  }
  v1::JobSpec saved;
  auto parsed = google::protobuf::util::JsonStringToMessage(manifest.spec_json, &saved);
  if (!parsed.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint of job '", manifest.job, "' step ",
                                            manifest.step, " has an unreadable spec"));
  }
  // Shard count, world size, bucket size and checkpoint policy may change on
  // restore; the model, strategy and optimizer may not.
  v1::JobSpec a = spec, b = saved;
  for (v1::JobSpec* x : {&a, &b}) {
    x->clear_num_shards();
    x->clear_world_size();
    x->clear_bucket_bytes();
    x->clear_align_elems();
    x->clear_checkpoint();
    x->clear_compression();  // the push's wire form, not the model
  }
  std::string diff = DiffJobSpecs(b, a);
  if (!diff.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", spec.job(), "' cannot restore the checkpoint of step ", manifest.step,
                     ": its model, strategy or optimizer differ: ", diff));
  }
  auto job = Create(spec, shard_index, epoch, std::move(memory));
  if (!job.ok()) return job.status();
  ShardJob& j = **job;
  if (j.layout_.num_params() != manifest.num_params) {
    return absl::FailedPreconditionError("checkpoint parameter count differs from the layout");
  }
  std::vector<float*> state;
  for (auto& slot : j.state_) state.push_back(slot.data());
  absl::Status skips = ValidateSkips(manifest.tensor_skips,
                                     static_cast<int>(j.layout_.tensors().size()), manifest.step);
  if (!skips.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint of job '", manifest.job, "' step ",
                                            manifest.step, ": ", skips.message()));
  }
  absl::Status s = checkpointer->Load(manifest, j.range_, j.values_.data(), state);
  if (!s.ok()) return s;
  absl::MutexLock lock(&j.mu_);
  if (!NoSkips(manifest.tensor_skips)) j.tensor_skips_ = manifest.tensor_skips;
  j.version_ = manifest.step;
  j.initialized_ = true;
  j.RefreshHalf(0, j.values_.size());
  j.restored_from_ = manifest.step;
  return job;
}

ShardJob::ShardJob(const v1::JobSpec& spec, Layout layout, int shard, int64_t epoch,
                   OptimizerParams optimizer, std::shared_ptr<PayloadMemory> memory)
    : spec_(spec),
      layout_(std::move(layout)),
      shard_(shard),
      range_(layout_.shard_range(shard)),
      job_id_(JobId(spec.job())),
      optimizer_(optimizer),
      world_(spec.world_size()),
      num_buckets_(layout_.num_buckets(shard)),
      half_(JobHalfType(spec)),
      topk_ratio_(spec.compression().topk_ratio()),
      epoch_(epoch),
      pushes_(num_buckets_, world_),
      staging_(range_.size(), is_ddp() ? 0 : StateSlots(optimizer)) {
  const size_t n = static_cast<size_t>(range_.size());
  values_ = PayloadVector<float>(PayloadAllocator<float>(memory));
  values_half_ = PayloadVector<uint16_t>(PayloadAllocator<uint16_t>(memory));
  values_.assign(n, 0.f);
  if (!is_ddp()) {
    state_.assign(StateSlots(optimizer), std::vector<float>(n, 0.f));
    float* state[kMaxStateSlots] = {};
    for (size_t k = 0; k < state_.size(); ++k) state[k] = state_[k].data();
    InitState(optimizer, state, n);  // a restore overwrites it
  }
  if (half_) values_half_.assign(n, 0);
  held_.resize(num_buckets_);
  for (auto& h : held_) h.resize(world_);
  spare_.resize(num_buckets_);
  if (topk_ratio_ > 0) {
    sparse_offset_.push_back(0);
    for (int b = 0; b < num_buckets_; ++b) {
      sparse_offset_.push_back(sparse_offset_.back() +
                               SparseBytes(TopkCount(topk_ratio_, bucket_elements(b))));
    }
    rank_sparse_.resize(world_);
  }
  borrowed_.assign(num_buckets_, std::vector<const void*>(world_, nullptr));
  leases_.resize(num_buckets_);
  for (auto& l : leases_) l.resize(world_);
  init_seen_.assign(num_buckets_, 0);
  bucket_updated_.assign(num_buckets_, 0);
  landed_prefix_.assign(num_buckets_, 0);
  folded_.assign(num_buckets_, 0);
  fold_queued_.assign(num_buckets_, 0);
  fold_running_.assign(num_buckets_, 0);
  updating_.assign(num_buckets_, 0);
  initialized_ = is_ddp() || num_buckets_ == 0;
  for (const TensorSlot& t : layout_.tensors())
    owned_.push_back(t.range().Overlaps(range_) ? 1 : 0);
}

absl::Status ShardJob::CheckHeader(const FrameHeader& h) {
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (h.job_id != job_id_) {
    return absl::NotFoundError(absl::StrCat(where, "frame is for another job"));
  }
  if (h.epoch != epoch_) {
    ++stale_epoch_frames_;
    return absl::FailedPreconditionError(
        absl::StrCat(where, "frame from membership epoch ", h.epoch, " but the job is at epoch ",
                     epoch_, "; the sender must re-read the membership view"));
  }
  if (h.shard != shard_) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "frame addressed to shard ", h.shard, " reached shard ", shard_));
  }
  if (h.rank < 0 || h.rank >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "rank ", h.rank, " is outside [0, ", world_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> ShardJob::AcceptData(const FrameHeader& h, bool borrow) {
  absl::MutexLock lock(&mu_);
  absl::Status s = CheckHeader(h);
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (s.ok() && (h.bucket < 0 || h.bucket >= num_buckets_)) {
    s = absl::InvalidArgumentError(
        absl::StrCat(where, "bucket ", h.bucket, " is outside [0, ", num_buckets_, ")"));
  }
  Range br;
  if (s.ok()) {
    br = layout_.bucket_range(shard_, h.bucket);
    // INIT carries fp32 masters; PUSH carries gradients in the wire precision,
    // or top-k pairs (index, value).
    const bool fp32 = h.type == FrameType::kInit || !half_;
    const bool sparse = h.type == FrameType::kPush && topk_ratio_ > 0;
    const uint64_t want = sparse ? SparseBytes(TopkCount(topk_ratio_, br.size()))
                                 : static_cast<uint64_t>(br.size()) * (fp32 ? 4 : 2);
    if (h.payload_bytes != want && sparse) {
      s = absl::InvalidArgumentError(absl::StrCat(where, "top-k bucket ", h.bucket, " carries ",
                                                  h.payload_bytes, " bytes; expected ", want, " (",
                                                  want / 8, " index/value pairs of ", br.size(),
                                                  " elements at ratio ", topk_ratio_, ")"));
    } else if (h.payload_bytes != want) {
      s = absl::InvalidArgumentError(absl::StrCat(where, "bucket ", h.bucket, " carries ",
                                                  h.payload_bytes, " bytes; expected ", want, " (",
                                                  br.size(), fp32 ? " float32)" : " half floats)"));
    }
  }
  if (s.ok() && h.type == FrameType::kInit) {
    if (is_ddp()) {
      s = absl::FailedPreconditionError(
          absl::StrCat(where, "DDP keeps parameters on the workers; INIT is not accepted"));
    } else if (h.rank != 0) {
      s = absl::PermissionDeniedError(
          absl::StrCat(where, "only rank 0 initializes parameters; got INIT from rank ", h.rank));
    } else if (initialized_ || h.step != 0) {
      s = absl::FailedPreconditionError(absl::StrCat(
          where, "parameters are already initialized (step ", version_, "); INIT refused"));
    } else if (init_seen_[h.bucket]) {
      s = absl::AlreadyExistsError(absl::StrCat(where, "INIT of bucket ", h.bucket, " repeated"));
    }
    if (!s.ok()) {
      ++rejected_;
      return s;
    }
    init_seen_[h.bucket] = 1;
    return values_.data() + (br.begin - range_.begin);
  }
  if (s.ok() && h.type != FrameType::kPush) {
    s = absl::InvalidArgumentError(
        absl::StrCat(where, FrameTypeName(h.type), " frames carry no gradient data"));
  }
  if (s.ok() && !initialized_) {
    s = absl::FailedPreconditionError(
        absl::StrCat(where, "parameters are not initialized yet; rank 0 must send INIT first"));
  }
  if (s.ok() && h.step != version_) {
    s = absl::FailedPreconditionError(
        absl::StrCat(where, "push for step ", h.step, " but the shard is at step ", version_));
  }
  if (s.ok() && pushes_.slot(h.bucket, h.rank) != PushTracker::Slot::kEmpty) {
    s = absl::AlreadyExistsError(absl::StrCat(where, "rank ", h.rank, " already pushed bucket ",
                                              h.bucket, " of step ", h.step));
  }
  if (!s.ok()) {
    ++rejected_;
    return s;
  }
  pushes_.Reserve(h.bucket, h.rank, absl::Now());
  if (topk_ratio_ > 0) {  // top-k pairs land in the rank's sparse buffer
    if (rank_sparse_[h.rank].empty()) rank_sparse_[h.rank].assign(sparse_offset_.back(), 0);
    if (borrow) return nullptr;
    return rank_sparse_[h.rank].data() + sparse_offset_[h.bucket];
  }
  if (borrow) return nullptr;
  // A buffer from the bucket's pool (allocated only when the pool is empty:
  // after the first steps, never on the step path).
  std::unique_ptr<float[]>& held = held_[h.bucket][h.rank];
  if (held == nullptr) {
    std::vector<std::unique_ptr<float[]>>& spare = spare_[h.bucket];
    if (!spare.empty()) {
      held = std::move(spare.back());
      spare.pop_back();
    } else {
      const size_t floats = (static_cast<size_t>(br.size()) * wire_bytes() + 3) / 4;
      held = std::make_unique<float[]>(floats);
      buffer_bytes_ += static_cast<int64_t>(floats * sizeof(float));
    }
  }
  return held.get();
}

void ShardJob::LandedLocked(int bucket, std::vector<const void*>* landed) const {
  landed->resize(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    const void* b = borrowed_[bucket][r];
    (*landed)[r] = b != nullptr ? b : held_[bucket][r].get();
  }
}

void ShardJob::ReturnBuffersLocked(int bucket, int from, int to) {
  for (int r = from; r < to; ++r) {
    std::unique_ptr<float[]>& held = held_[bucket][r];
    if (held != nullptr) spare_[bucket].push_back(std::move(held));
  }
}

ShardJob::Completion ShardJob::CompleteReceive(const FrameHeader& h, const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  Completion c;
  if (h.type == FrameType::kInit) {
    if (!s.ok()) {
      init_seen_[h.bucket] = 0;
      return c;
    }
    if (++init_buckets_ == num_buckets_) {
      initialized_ = true;
      RefreshHalf(0, values_.size());
      c.serve.version = version_;
      if (spec_.checkpoint().initial()) c.serve.snapshot = SnapshotLocked();
      ServeWaitingLocked(&c.serve);
    }
    return c;
  }
  absl::Status landed = s;
  if (landed.ok() && topk_ratio_ > 0) {
    // The pairs are checked before they count: a malformed push is refused
    // and the rank may push the bucket again.
    const int64_t n = bucket_elements(h.bucket);
    landed = CheckSparse(rank_sparse_[h.rank].data() + sparse_offset_[h.bucket],
                         TopkCount(topk_ratio_, n), n);
    if (!landed.ok()) {
      ++rejected_;
      c.error = absl::InvalidArgumentError(absl::StrCat("job '", spec_.job(), "' shard ", shard_,
                                                        ": bucket ", h.bucket, " from rank ",
                                                        h.rank, ": ", landed.message()));
    }
  }
  if (!landed.ok()) {
    pushes_.Release(h.bucket, h.rank);
    if (!StepInProgressLocked()) pushes_.StopClock();
    return c;
  }
  pushed_bytes_ += static_cast<int64_t>(h.payload_bytes);
  const bool complete = pushes_.Receive(h.bucket, h.rank);
  int& prefix = landed_prefix_[h.bucket];
  while (prefix < world_ && pushes_.slot(h.bucket, prefix) == PushTracker::Slot::kReceived) {
    ++prefix;
  }
  if (complete) {
    c.update = h.bucket;
  } else if (fold_prefix_ && world_ >= 3 && topk_ratio_ == 0 && !fold_queued_[h.bucket] &&
             prefix >= 2 && prefix > folded_[h.bucket]) {
    if (acc_.empty()) acc_.assign(static_cast<size_t>(range_.size()), 0.f);
    fold_queued_[h.bucket] = 1;
    c.fold = h.bucket;
  }
  return c;
}

ShardJob::Completion ShardJob::CompleteBorrowed(const FrameHeader& h, const void* data,
                                                std::shared_ptr<void> lease) {
  {
    absl::MutexLock lock(&mu_);
    borrowed_[h.bucket][h.rank] = data;
    leases_[h.bucket][h.rank] = std::move(lease);
  }
  return CompleteReceive(h, absl::OkStatus());
}

const float* ShardJob::RankChunk(int r, const std::vector<const void*>& landed, size_t bucket_at,
                                 size_t off, size_t n, float* scratch) const {
  const void* src = static_cast<const char*>(landed[r]) + (off - bucket_at) * wire_bytes();
  if (!half_) return static_cast<const float*>(src);
  HalfToFloat(*half_, static_cast<const uint16_t*>(src), scratch, n);
  return scratch;
}

int ShardJob::ChunkSources(const std::vector<const void*>& landed, size_t bucket_at, size_t off,
                           size_t n, bool with_acc, int from, int to, std::vector<float>* widened,
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

void ShardJob::FoldPrefix(int bucket) {
  const Range br = layout_.bucket_range(shard_, bucket);
  const size_t bucket_at = static_cast<size_t>(br.begin - range_.begin);
  const int64_t chunk = half_ ? kWidenChunk : br.size();
  thread_local std::vector<const void*> landed;
  thread_local std::vector<float> widened;
  thread_local std::vector<const float*> srcs;
  for (;;) {
    int from;
    int to;
    {
      absl::MutexLock lock(&mu_);
      from = folded_[bucket];
      to = landed_prefix_[bucket];
      // Nothing new in order, or the bucket is complete (its update sums
      // the rest), or another fold of it runs (and will look again).
      if (fold_running_[bucket] || updating_[bucket] || pushes_.Complete(bucket) ||
          to <= std::max(from, 1)) {
        if (!fold_running_[bucket]) fold_queued_[bucket] = 0;
        return;
      }
      fold_running_[bucket] = 1;
      LandedLocked(bucket, &landed);
    }
    const auto started = std::chrono::steady_clock::now();
    // acc_ = rank 0 + rank 1 + ... (from == 0), or acc_ + rank from + ...:
    // the left-to-right sum UpdateBucket would have started with.
    for (int64_t c = br.begin; c < br.end; c += chunk) {
      const Range part{c, std::min(br.end, c + chunk)};
      const size_t off = static_cast<size_t>(part.begin - range_.begin);
      const size_t n = static_cast<size_t>(part.size());
      const int count =
          ChunkSources(landed, bucket_at, off, n, /*with_acc=*/from > 0, from, to, &widened, &srcs);
      ReduceSum(srcs.data(), count, acc_.data() + off, n);
    }
    const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - started)
                                .count();
    absl::MutexLock lock(&mu_);
    folded_pushes_ += to - from;
    ReturnBuffersLocked(bucket, from, to);  // summed: free for other pushes
    folded_[bucket] = to;
    fold_running_[bucket] = 0;
    update_us_ += took_us;
  }
}

ShardJob::Serve ShardJob::UpdateBucket(int bucket) {
  int64_t step;
  int folded;
  OptimizerParams optimizer;
  std::vector<int64_t> skips;  // copies: SkipTensors may add to skip_now_ meanwhile
  std::vector<uint8_t> skip_now;
  thread_local std::vector<const void*> landed;
  {
    absl::MutexLock lock(&mu_);
    ++updates_running_;
    // A fold of this bucket that already started ends first (it is bounded
    // work that waits for nothing); one that has not started will not.
    updating_[bucket] = 1;
    std::pair<ShardJob*, int> arg{this, bucket};
    mu_.Await(absl::Condition(
        +[](std::pair<ShardJob*, int>* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->first->mu_) {
          return a->first->fold_running_[a->second] == 0;
        },
        &arg));
    LandedLocked(bucket, &landed);
    folded = folded_[bucket];
    step = version_ + 1;
    optimizer = optimizer_;
    if (!is_ddp() && (!tensor_skips_.empty() || !skip_now_.empty())) {
      skips = tensor_skips_;
      skip_now = skip_now_;
    }
  }
  const auto started = std::chrono::steady_clock::now();
  const Range br = layout_.bucket_range(shard_, bucket);
  const size_t bucket_at = static_cast<size_t>(br.begin - range_.begin);
  // Mixed precision widens the ranks' half gradients exactly, a chunk at a
  // time, into this thread's scratch (no allocation once it has grown), then
  // reduces in fp32 in rank order: element-wise, so chunking changes no bit.
  const int64_t chunk = half_ ? kWidenChunk : br.size();
  const int64_t topk = TopkCount(topk_ratio_, br.size());
  // Prefix order: ranks [0, folded) are summed in acc_ already, so the
  // sources are acc_ and ranks folded..W-1, still divided by W.
  const int first = folded >= 2 ? folded : 0;
  thread_local std::vector<float> widened;
  thread_local std::vector<const float*> srcs;
  thread_local std::vector<const float*> run_srcs;
  size_t off = 0;  // the chunk's offset in the shard, for `apply`
  // Per run of tensors at the same step; tensors no rank had a gradient
  // for are left alone (one run, at `step`, unless some tensor was skipped).
  const std::function<void(Range, int64_t)> apply = [&](Range run, int64_t t_step) {
    const size_t at = static_cast<size_t>(run.begin - range_.begin);
    const size_t rel = at - off;
    float* state[kMaxStateSlots] = {};
    for (size_t k = 0; k < state_.size(); ++k) state[k] = state_[k].data() + at;
    const float* const* from = srcs.data();
    if (rel != 0) {  // a later run of the chunk (only when some tensor was skipped)
      run_srcs.resize(srcs.size());
      for (size_t r = 0; r < srcs.size(); ++r) run_srcs[r] = srcs[r] + rel;
      from = run_srcs.data();
    }
    ReduceAndApply(optimizer, t_step, values_.data() + at, from, static_cast<int>(srcs.size()),
                   state, static_cast<size_t>(run.size()), world_);
  };
  for (int64_t c = br.begin; c < br.end; c += chunk) {
    const Range part{c, std::min(br.end, c + chunk)};
    off = static_cast<size_t>(part.begin - range_.begin);
    const size_t n = static_cast<size_t>(part.size());
    if (topk > 0) {  // each rank's pairs, densified (one chunk: the bucket)
      if (widened.size() < static_cast<size_t>(world_) * n) widened.resize(world_ * n);
      srcs.resize(static_cast<size_t>(world_));
      for (int r = 0; r < world_; ++r) {
        float* to = widened.data() + static_cast<size_t>(r) * n;
        Densify(rank_sparse_[r].data() + sparse_offset_[bucket], topk, to, static_cast<int64_t>(n));
        srcs[r] = to;
      }
    } else {
      ChunkSources(landed, bucket_at, off, n, /*with_acc=*/first > 0, first, world_, &widened,
                   &srcs);
    }
    if (is_ddp()) {
      ReduceMean(srcs.data(), static_cast<int>(srcs.size()), values_.data() + off, n, world_);
      continue;
    }
    ForEachUpdateRun(layout_, part, step, skips, skip_now, apply);
  }
  // Mixed precision: the parameters (DDP: the mean) go back in half.
  RefreshHalf(static_cast<size_t>(br.begin - range_.begin), static_cast<size_t>(br.size()));
  const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  absl::MutexLock lock(&mu_);
  --updates_running_;
  update_us_ += took_us;
  Serve serve;
  folded_[bucket] = 0;
  updating_[bucket] = 0;
  ReturnBuffersLocked(bucket, 0, world_);
  fold_queued_[bucket] = 0;
  // The borrowed pushes are read: back to their workers.
  std::fill(borrowed_[bucket].begin(), borrowed_[bucket].end(), nullptr);
  for (std::shared_ptr<void>& lease : leases_[bucket]) {
    // A lease may own a null pointer (only its deleter matters): test the
    // count, not the pointer.
    if (lease.use_count() > 0) serve.released.push_back(std::move(lease));
    lease.reset();
  }
  if (++buckets_updated_ < num_buckets_) {
    // Early serving: the pulls of this step get this bucket now.
    bucket_updated_[bucket] = 1;
    for (Waiting& w : deferred_) {
      const Puller& p = w.puller;
      const int at = bucket - p.first_bucket;
      if (p.version != step || at < 0 || at >= p.bucket_count || w.sent[at]) continue;
      w.sent[at] = 1;
      Puller now = p;
      now.buckets.assign(1, bucket);
      serve.pullers.push_back(std::move(now));
    }
    serve.version = version_;
    return serve;
  }
  ++version_;
  ++applied_steps_;
  buckets_updated_ = 0;
  std::fill(bucket_updated_.begin(), bucket_updated_.end(), 0);
  for (size_t t = 0; t < skip_now_.size(); ++t) skip_now_[t] &= owned_[t];
  AdvanceSkips(skip_now_, &tensor_skips_);
  skip_now_.clear();
  pushes_.NextStep();
  std::fill(landed_prefix_.begin(), landed_prefix_.end(), 0);
  serve.version = version_;
  const int64_t every = spec_.checkpoint().every_steps();
  auto requested = std::find(checkpoint_requests_.begin(), checkpoint_requests_.end(), version_);
  if ((every > 0 && version_ % every == 0) || requested != checkpoint_requests_.end()) {
    if (requested != checkpoint_requests_.end()) checkpoint_requests_.erase(requested);
    serve.snapshot = SnapshotLocked();
  }
  ServeWaitingLocked(&serve);
  return serve;
}

void ShardJob::ServeWaitingLocked(Serve* serve) {
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (it->puller.version != version_) {
      ++it;
      continue;
    }
    Puller p = std::move(it->puller);
    for (int i = 0; i < p.bucket_count; ++i) {
      if (!it->sent[i]) p.buckets.push_back(p.first_bucket + i);
    }
    serve->pullers.push_back(std::move(p));
    it = deferred_.erase(it);
  }
}

absl::StatusOr<ShardJob::Serve> ShardJob::AcceptPull(const FrameHeader& h, uint64_t reply_to) {
  absl::MutexLock lock(&mu_);
  absl::Status s = CheckHeader(h);
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (s.ok() && h.payload_bytes != 0) {
    s = absl::InvalidArgumentError(absl::StrCat(where, "PULL carries no payload"));
  }
  if (s.ok() && (h.bucket < 0 || h.bucket > num_buckets_ ||
                 static_cast<int64_t>(h.bucket_count) > num_buckets_ - h.bucket)) {
    s = absl::InvalidArgumentError(absl::StrCat(where, "PULL of buckets [", h.bucket, ", ",
                                                int64_t{h.bucket} + h.bucket_count,
                                                ") is outside [0, ", num_buckets_, ")"));
  }
  const bool ready = initialized_ && h.step == version_;
  const bool in_flight = h.step == version_ + (initialized_ ? 1 : 0);
  if (s.ok() && !ready && !in_flight) {
    s = absl::FailedPreconditionError(h.step < version_
                                          ? absl::StrCat(where, "parameters of step ", h.step,
                                                         " were replaced by step ", version_)
                                          : absl::StrCat(where, "pull for step ", h.step,
                                                         " but the shard is at step ", version_,
                                                         "; push that step's gradients first"));
  }
  if (!s.ok()) {
    ++rejected_;
    return s;
  }
  Serve serve;
  serve.version = version_;
  Puller p{reply_to, h.rank, h.step, h.bucket, static_cast<int>(h.bucket_count), {}};
  if (ready) {
    for (int i = 0; i < p.bucket_count; ++i) p.buckets.push_back(p.first_bucket + i);
    serve.pullers.push_back(std::move(p));
    return serve;
  }
  // In flight: the buckets this step already updated go now, the rest as
  // their updates end.
  Waiting w{p, std::vector<uint8_t>(static_cast<size_t>(p.bucket_count), 0)};
  if (initialized_) {
    Puller now = p;
    for (int i = 0; i < p.bucket_count; ++i) {
      if (!bucket_updated_[p.first_bucket + i]) continue;
      w.sent[i] = 1;
      now.buckets.push_back(p.first_bucket + i);
    }
    if (!now.buckets.empty()) serve.pullers.push_back(std::move(now));
  }
  deferred_.push_back(std::move(w));
  return serve;
}

std::vector<ShardJob::Puller> ShardJob::TakeWaitingPulls() {
  absl::MutexLock lock(&mu_);
  std::vector<Puller> waiting;
  for (Waiting& w : deferred_) waiting.push_back(std::move(w.puller));
  deferred_.clear();
  return waiting;
}

bool ShardJob::StepInProgressLocked() const {
  return buckets_updated_ > 0 || updates_running_ > 0 || pushes_.AnyPushed();
}

std::optional<std::string> ShardJob::StallReport(absl::Time now, absl::Duration after) {
  absl::MutexLock lock(&mu_);
  const std::optional<absl::Duration> stalled = pushes_.StallDue(now, after);
  if (!stalled) return std::nullopt;
  // Who the step waits for: per rank, the buckets it has not pushed, and
  // those whose payload is still on its way.
  const PushTracker::Waiting waiting = pushes_.DescribeWaiting(worker_ids_);
  const std::vector<std::string>& missing = waiting.pushes;
  const std::vector<std::string>& receiving = waiting.receives;
  std::string out = absl::StrCat(
      "job '", spec_.job(), "' shard ", shard_, ": step ", version_, " (epoch ", epoch_,
      ") stalled for ", absl::FormatDuration(absl::Trunc(*stalled, absl::Milliseconds(100))));
  if (!missing.empty()) {
    absl::StrAppend(&out, ", waiting for pushes from ", absl::StrJoin(missing, ", "));
  }
  if (!receiving.empty()) {
    absl::StrAppend(&out, missing.empty() ? ", " : "; ", "receives not finished from ",
                    absl::StrJoin(receiving, ", "));
  }
  if (missing.empty() && receiving.empty()) {
    absl::StrAppend(&out, ", every push arrived; ", buckets_updated_, " of ", num_buckets_,
                    " buckets updated (", updates_running_, " running)");
  }
  std::vector<int> pullers;
  for (const Waiting& w : deferred_) {
    if (w.puller.version == version_ + 1) pullers.push_back(w.puller.rank);
  }
  std::sort(pullers.begin(), pullers.end());
  pullers.erase(std::unique(pullers.begin(), pullers.end()), pullers.end());
  if (!pullers.empty()) {
    absl::StrAppend(&out, "; pulls waiting for step ", version_ + 1, ": ",
                    pullers.size() == 1 ? "rank " : "ranks ", absl::StrJoin(pullers, ", "));
  }
  return out;
}

ShardSnapshot ShardJob::SnapshotLocked() {
  const absl::Time t0 = absl::Now();
  ShardSnapshot s;
  s.job = spec_.job();
  s.shard = shard_;
  s.num_shards = spec_.num_shards();
  s.num_params = layout_.num_params();
  s.step = version_;
  s.epoch = epoch_;
  s.range = range_;
  s.keep_last = spec_.checkpoint().keep_last();
  s.values.assign(values_.begin(), values_.end());
  s.state = state_;
  s.tensor_skips = tensor_skips_;
  s.pause_us = absl::ToInt64Microseconds(absl::Now() - t0);
  last_pause_us_ = s.pause_us;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(spec_, &s.spec_json, opts);
  (void)st;
  return s;
}

absl::StatusOr<std::optional<ShardSnapshot>> ShardJob::RequestCheckpoint(int64_t step,
                                                                         bool cancel) {
  absl::MutexLock lock(&mu_);
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (is_ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where,
                     "DDP keeps parameters on the workers; shard servers checkpoint zero1, zero2 "
                     "and fsdp jobs"));
  }
  if (cancel) {
    checkpoint_requests_.erase(
        std::remove(checkpoint_requests_.begin(), checkpoint_requests_.end(), step),
        checkpoint_requests_.end());
    return std::optional<ShardSnapshot>();
  }
  if (!initialized_) {
    return absl::FailedPreconditionError(absl::StrCat(where, "not initialized yet"));
  }
  if (step == version_ && !StepInProgressLocked()) {
    mu_.Await(absl::Condition(
        +[](int* running) { return *running == 0; }, &updates_running_));
    return std::optional<ShardSnapshot>(SnapshotLocked());
  }
  if (step <= version_) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, "step ", step, " has passed or is in progress (the shard is at step ", version_,
        StepInProgressLocked() ? ", next step in progress" : "", "); ask for a later step"));
  }
  if (std::find(checkpoint_requests_.begin(), checkpoint_requests_.end(), step) ==
      checkpoint_requests_.end()) {
    checkpoint_requests_.push_back(step);
  }
  return std::optional<ShardSnapshot>();
}

void ShardJob::SetCheckpointProgress(const CheckpointProgress& p) {
  absl::MutexLock lock(&mu_);
  checkpoint_progress_ = p;
}

void ShardJob::RefreshHalf(size_t offset, size_t n) {
  if (half_) FloatToHalf(*half_, values_.data() + offset, values_half_.data() + offset, n);
}

const void* ShardJob::served_bucket(int b) const {
  const int64_t off = layout_.bucket_range(shard_, b).begin - range_.begin;
  if (half_) return values_half_.data() + off;
  return values_.data() + off;
}

uint64_t ShardJob::served_bytes(int b) const {
  return static_cast<uint64_t>(layout_.bucket_range(shard_, b).size()) * wire_bytes();
}

absl::Status ShardJob::SetOptimizer(const OptimizerParams& optimizer, int64_t step) {
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (is_ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "DDP runs the optimizer on the workers; the servers only average"));
  }
  absl::Status valid = ValidateOptimizerParams(optimizer);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(where, valid.message()));
  absl::MutexLock lock(&mu_);
  if (optimizer.kind != optimizer_.kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "the optimizer is ", OptimizerKindName(optimizer_.kind), "; it cannot become ",
        OptimizerKindName(optimizer.kind), " (its state would not fit)"));
  }
  if (step != version_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "new optimizer settings from step ", step, " but the shard is at step ",
                     version_, ": set them between steps, before pushing step ", version_ + 1));
  }
  if (buckets_updated_ > 0 || updates_running_ > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "step ", step, " is already being applied (every rank pushed some of ",
                     "its buckets): set new optimizer settings before pushing a step"));
  }
  optimizer_ = optimizer;
  return absl::OkStatus();
}

absl::Status ShardJob::SkipTensors(const std::vector<int32_t>& tensors, int64_t step) {
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (is_ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "DDP runs the optimizer on the workers; they skip tensors themselves"));
  }
  std::vector<uint8_t> mask;
  absl::Status valid =
      SkipMaskFromIndices(tensors, static_cast<int>(layout_.tensors().size()), &mask);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "SkipTensors: ", valid.message()));
  }
  absl::MutexLock lock(&mu_);
  if (step != version_ + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "tensors to skip at step ", step, " but the shard is at step ",
                     version_, ": send them before pushing step ", version_ + 1));
  }
  if (!skip_now_.empty() || !mask.empty()) {
    if (!skip_now_.empty() && skip_now_ != mask) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "another rank skips a different set of tensors at step ", step,
                       ": every rank must skip the same ones (those no rank has a gradient for)"));
    }
    for (int b = 0; b < num_buckets_ && skip_now_.empty(); ++b) {
      if (!pushes_.Complete(b)) continue;
      const Range br = layout_.bucket_range(shard_, b);
      for (int32_t t : tensors) {
        const TensorSlot& ts = layout_.tensors()[static_cast<size_t>(t)];
        if (ts.range().Overlaps(br)) {
          return absl::FailedPreconditionError(absl::StrCat(
              where, "tensor '", ts.name, "' cannot be skipped at step ", step, ": bucket ", b,
              ", which holds it, has been pushed by every rank already"));
        }
      }
    }
  }
  skip_now_ = std::move(mask);
  return absl::OkStatus();
}

std::vector<int64_t> ShardJob::tensor_skips() {
  absl::MutexLock lock(&mu_);
  return tensor_skips_;
}

absl::Status ShardJob::SetEpoch(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", spec_.job(), "': epoch may not go back from ", epoch_, " to ", epoch));
  }
  epoch_ = epoch;
  return absl::OkStatus();
}

int64_t ShardJob::epoch() {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void ShardJob::InheritCounters(ShardJob& previous) {
  int64_t rejected, stale, applied, pushed, pulled, update_us, folded;
  int recoveries;
  {
    absl::MutexLock lock(&previous.mu_);
    update_us = previous.update_us_;
    folded = previous.folded_pushes_;
    rejected = previous.rejected_;
    stale = previous.stale_epoch_frames_;
    applied = previous.applied_steps_;
    pushed = previous.pushed_bytes_;
    pulled = previous.pulled_bytes_;
    recoveries = previous.recoveries_;
  }
  absl::MutexLock lock(&mu_);
  rejected_ += rejected;
  stale_epoch_frames_ += stale;
  applied_steps_ += applied;
  update_us_ += update_us;
  folded_pushes_ += folded;
  pushed_bytes_ += pushed;
  pulled_bytes_ += pulled;
  recoveries_ += recoveries + 1;
}

void ShardJob::StartAt(int64_t step) {
  absl::MutexLock lock(&mu_);
  version_ = step;
  restored_from_ = step;
  pushes_.StopClock();
}

int64_t ShardJob::restored_from() {
  absl::MutexLock lock(&mu_);
  return restored_from_;
}

void ShardJob::SetWorkerIds(std::vector<int> ids) {
  absl::MutexLock lock(&mu_);
  worker_ids_ = std::move(ids);
}

std::vector<int> ShardJob::worker_ids() {
  absl::MutexLock lock(&mu_);
  return worker_ids_;
}

void ShardJob::CountRejected() {
  absl::MutexLock lock(&mu_);
  ++rejected_;
}

void ShardJob::CountPulled(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  pulled_bytes_ += static_cast<int64_t>(bytes);
}

int64_t ShardJob::version() {
  absl::MutexLock lock(&mu_);
  return version_;
}

std::string ShardJob::DigestLocked() {
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &updates_running_));
  Digest d;
  d.UpdateInt(version_);
  d.UpdateInt(initialized_ ? 1 : 0);
  d.Update(values_.data(), values_.size() * sizeof(float));
  for (const auto& s : state_) d.Update(s.data(), s.size() * sizeof(float));
  if (!tensor_skips_.empty())
    d.Update(tensor_skips_.data(), tensor_skips_.size() * sizeof(int64_t));
  return d.Hex();
}

v1::ShardStats ShardJob::Stats(bool with_digest) {
  absl::MutexLock lock(&mu_);
  v1::ShardStats st;
  st.set_job(spec_.job());
  st.set_shard_index(shard_);
  st.set_range_begin(range_.begin);
  st.set_range_end(range_.end);
  st.set_epoch(epoch_);
  st.set_step(version_);
  st.set_initialized(initialized_);
  const int64_t n = range_.size() * static_cast<int64_t>(sizeof(float));
  auto* mem = st.mutable_memory();
  const int64_t wire = range_.size() * static_cast<int64_t>(wire_bytes());
  // Receive buffers as allocated: a rank whose pushes are read in place
  // (zero-copy) has none; top-k pushes land in small sparse buffers.
  int64_t received = 0;
  received += buffer_bytes_;  // the pools of copied pushes' buffers
  for (const auto& g : rank_sparse_) received += static_cast<int64_t>(g.size());
  received += static_cast<int64_t>(acc_.size() * sizeof(float));  // prefix order
  if (is_ddp()) {
    // receive buffers and the mean (fp32, + its half copy when mixed)
    mem->set_grad_buffer_bytes(received + n + (half_ ? wire : 0));
  } else {
    // fp32 masters (+ the served half copy under mixed precision).
    mem->set_params_bytes(n + (half_ ? wire : 0));
    mem->set_optimizer_bytes(n * static_cast<int64_t>(state_.size()));
    mem->set_grad_buffer_bytes(received);
  }
  if (with_digest) st.set_state_digest(DigestLocked());
  st.set_rejected_frames(rejected_);
  st.set_pushed_bytes(pushed_bytes_);
  st.set_pulled_bytes(pulled_bytes_);
  st.set_step_in_progress(StepInProgressLocked());
  st.set_last_checkpoint_step(checkpoint_progress_.last_step);
  st.set_checkpoint_error(checkpoint_progress_.error);
  st.set_last_snapshot_pause_us(last_pause_us_);
  st.set_restored_from_step(restored_from_);
  st.set_strategy(StrategyName(spec_.strategy()));
  st.set_world_size(spec_.world_size());
  st.set_num_shards(spec_.num_shards());
  st.set_num_params(layout_.num_params());
  st.set_stale_epoch_frames(stale_epoch_frames_);
  st.set_applied_steps(applied_steps_);
  st.set_update_us(update_us_);
  st.set_folded_pushes(folded_pushes_);
  st.set_recoveries(recoveries_);
  for (int id : worker_ids_) st.add_worker_ids(id);
  return st;
}

std::vector<float> ShardJob::ParamsSnapshot() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &updates_running_));
  return std::vector<float>(values_.begin(), values_.end());
}

}  // namespace tessel

namespace tessel {

absl::StatusOr<v1::ShardState> ShardJob::ReadState(const v1::ReadStateRequest& req) {
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  if (is_ddp()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "DDP keeps parameters and optimizer state on the workers"));
  }
  const int64_t n = range_.size();
  if (req.offset() < 0 || req.count() < 0 || req.count() > (int64_t{4} << 20) || req.offset() > n ||
      req.count() > n - req.offset()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "ReadState [", req.offset(), ", +",
                                                   req.count(), ") is outside the range of ", n,
                                                   " elements (at most 4Mi per call)"));
  }
  absl::MutexLock lock(&mu_);
  if (req.epoch() != 0 && req.epoch() != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(where, "ReadState from epoch ", req.epoch(),
                                                      " but the job is at epoch ", epoch_));
  }
  if (!initialized_) {
    return absl::FailedPreconditionError(absl::StrCat(where, "not initialized yet"));
  }
  if (req.step() != version_ || StepInProgressLocked()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "ReadState for step ", req.step(), " but the shard is at step ",
                     version_, StepInProgressLocked() ? " with the next step in progress" : "",
                     "; read between steps, when every worker has finished the step"));
  }
  v1::ShardState out;
  out.set_step(version_);
  out.set_range_begin(range_.begin);
  out.set_range_end(range_.end);
  out.set_offset(req.offset());
  out.set_state_slots(static_cast<int>(state_.size()));
  for (int64_t s : tensor_skips_) out.add_tensor_skips(s);
  const size_t bytes = static_cast<size_t>(req.count()) * sizeof(float);
  out.mutable_params()->assign(reinterpret_cast<const char*>(values_.data() + req.offset()), bytes);
  std::string* st = out.mutable_state();
  st->reserve(bytes * state_.size());
  for (const auto& slot : state_) {
    st->append(reinterpret_cast<const char*>(slot.data() + req.offset()), bytes);
  }
  return out;
}

absl::StatusOr<v1::WriteStateResponse> ShardJob::WriteState(const v1::WriteStateRequest& req) {
  const std::string where = absl::StrCat("job '", spec_.job(), "' shard ", shard_, ": ");
  const int64_t n = range_.size();
  absl::MutexLock lock(&mu_);
  if (req.step() < 0) return absl::InvalidArgumentError(absl::StrCat(where, "negative step"));
  if (req.epoch() != 0 && req.epoch() != epoch_) {
    // A writer from before a recovery (a zombie): nothing of it is kept.
    staging_.Drop();
    return absl::FailedPreconditionError(absl::StrCat(where, "WriteState from epoch ", req.epoch(),
                                                      " but the job is at epoch ", epoch_));
  }
  if (!req.params().empty() || !req.state().empty()) {
    if (is_ddp()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "DDP shards hold no parameters; send only the commit"));
    }
    if (!staging_.Stage(req.step(), req.offset(), req.params(), req.state())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "WriteState chunk at offset ", req.offset(), " with ", req.params().size(),
          " param bytes and ", req.state().size(), " state bytes does not fit a range of ", n,
          " elements with ", state_.size(), " state slots; staging dropped"));
    }
  }
  v1::WriteStateResponse resp;
  resp.set_staged(staging_.staged());
  resp.set_step(version_);
  if (!req.commit()) return resp;
  const std::vector<int64_t> skips(req.tensor_skips().begin(), req.tensor_skips().end());
  absl::Status skips_ok =
      ValidateSkips(skips, static_cast<int>(layout_.tensors().size()), req.step());
  if (!skips_ok.ok()) {
    staging_.Drop();
    return absl::InvalidArgumentError(absl::StrCat(where, "commit of step ", req.step(), ": ",
                                                   skips_ok.message(), "; nothing changed"));
  }
  if (!is_ddp() && !staging_.Complete(req.step())) {
    const int64_t got = staging_.step() == req.step() ? staging_.staged() : 0;
    staging_.Drop();
    return absl::FailedPreconditionError(
        absl::StrCat(where, "commit of step ", req.step(), " with ", got, " of ", n,
                     " elements staged; send every chunk of the range first; nothing changed"));
  }
  if (StepInProgressLocked() || !deferred_.empty()) {
    staging_.Drop();
    return absl::FailedPreconditionError(
        absl::StrCat(where,
                     "a step is in progress (buckets pushed or pulls waiting); write the state "
                     "between steps, when every worker is idle; nothing changed"));
  }
  if (!is_ddp()) {
    staging_.CopyTo(absl::MakeSpan(values_), state_);
    RefreshHalf(0, static_cast<size_t>(n));
    initialized_ = true;
  }
  version_ = req.step();
  tensor_skips_ = NoSkips(skips) ? std::vector<int64_t>() : skips;
  skip_now_.clear();
  pushes_.StopClock();
  staging_.Drop();
  resp.set_step(version_);
  resp.set_staged(0);
  return resp;
}

}  // namespace tessel
