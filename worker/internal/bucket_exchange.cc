#include "worker/internal/bucket_exchange.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/topk.h"
#include "core/wire.h"
#include "runtime/log.h"

namespace tessel::internal {

BucketExchange::BucketExchange(JobContext* ctx, DataChannel* channel)
    : ctx_(ctx),
      channel_(channel),
      shuffle_rng_(ctx->options.shuffle_seed),
      aggregator_(ctx, channel) {
  std::shared_ptr<PayloadMemory> memory = channel_->transport().payload_memory();
  buffers_.params = PayloadVector<float>(PayloadAllocator<float>(memory));
  buffers_.grads = PayloadVector<float>(PayloadAllocator<float>(memory));
  buffers_.params_half = PayloadVector<uint16_t>(PayloadAllocator<uint16_t>(memory));
  buffers_.grads_half = PayloadVector<uint16_t>(PayloadAllocator<uint16_t>(memory));
}

void BucketExchange::Allocate() {
  const Layout& layout = *ctx_->layout;
  const size_t n = static_cast<size_t>(layout.num_params());
  if (ctx_->unit_grads()) {
    if (!ctx_->fsdp()) {  // zero2 with units: full params, per-unit grads
      if (ctx_->half) {
        buffers_.params_half.assign(n, 0);
      } else {
        buffers_.params.assign(n, 0.f);
      }
    }
  } else if (ctx_->half) {
    buffers_.params_half.assign(n, 0);
    buffers_.grads_half.assign(n, 0);
    if (ctx_->ddp()) buffers_.params.assign(n, 0.f);  // DDP keeps fp32 masters on the worker
  } else {
    buffers_.params.assign(n, 0.f);
    buffers_.grads.assign(n, 0.f);
  }
  const int shards = channel_->num_shards();
  const double topk = ctx_->options.topk_ratio;
  residual_.clear();
  sparse_.clear();
  sparse_at_.assign(static_cast<size_t>(shards), {});
  if (topk > 0) {
    residual_.assign(n, 0.f);
    uint64_t at = 0;
    for (int s = 0; s < shards; ++s) {
      for (int b = 0; b < layout.num_buckets(s); ++b) {
        sparse_at_[s].push_back(at);
        at += SparseBytes(TopkCount(topk, layout.bucket_range(s, b).size()));
      }
    }
    sparse_.assign(at, 0);
  }
  ready_elems_.assign(static_cast<size_t>(shards), {});
  pushed_.assign(static_cast<size_t>(shards), {});
  caller_sparse_.assign(static_cast<size_t>(shards), {});
  for (int s = 0; s < shards; ++s) {
    ready_elems_[s].assign(static_cast<size_t>(layout.num_buckets(s)), 0);
    pushed_[s].assign(static_cast<size_t>(layout.num_buckets(s)), 0);
    caller_sparse_[s].assign(static_cast<size_t>(layout.num_buckets(s)), 0);
  }
  aggregator_.Configure(ctx_->rank_groups);
}

absl::Status BucketExchange::AccumulateGradients(absl::Span<const float> micro) {
  PayloadVector<float>& grads = buffers_.grads;
  if (grads.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        ctx_->Where(),
        ": gradient accumulation needs a full fp32 gradient buffer (ddp, zero1, or zero2 "
        "without units or mixed precision)"));
  }
  if (micro.size() != grads.size()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": micro-batch gradient has ",
                                                   micro.size(), " floats; the model has ",
                                                   grads.size()));
  }
  if (micro_batches_++ == 0) {
    std::copy(micro.begin(), micro.end(), grads.begin());
  } else {
    for (size_t i = 0; i < grads.size(); ++i) grads[i] += micro[i];
  }
  return absl::OkStatus();
}

absl::Status BucketExchange::GradientsReady(int64_t begin, int64_t end) {
  const Layout& layout = *ctx_->layout;
  if (begin < 0 || end > layout.num_params() || begin > end) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": GradientsReady range [", begin,
                                                   ", ", end, ") is outside [0, ",
                                                   layout.num_params(), ")"));
  }
  if (ctx_->options.shuffle_seed != 0) return absl::OkStatus();  // Exchange pushes shuffled
  while (begin < end) {
    const int s = layout.ShardOf(begin);
    const int b = layout.BucketOf(s, begin);
    const Range br = layout.bucket_range(s, b);
    const int64_t upto = std::min(end, br.end);
    ready_elems_[s][b] += upto - begin;
    if (ready_elems_[s][b] > br.size()) {
      return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": gradients of bucket ", b,
                                                     " of shard ", s, " were handed over twice"));
    }
    if (ready_elems_[s][b] == br.size() && !pushed_[s][b]) PushBucket(s, b);
    begin = upto;
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<uint8_t>> BucketExchange::SparseBucket(int shard, int bucket) {
  if (residual_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": no top-k compression (options.topk_ratio is 0)"));
  }
  const Layout& layout = *ctx_->layout;
  if (shard < 0 || shard >= static_cast<int>(sparse_at_.size()) || bucket < 0 ||
      bucket >= layout.num_buckets(shard)) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": no bucket ", bucket,
                                                   " of shard ", shard, " (", sparse_at_.size(),
                                                   " shards)"));
  }
  const uint64_t bytes =
      SparseBytes(TopkCount(ctx_->options.topk_ratio, layout.bucket_range(shard, bucket).size()));
  return absl::MakeSpan(sparse_.data() + sparse_at_[shard][bucket], bytes);
}

absl::Status BucketExchange::SparseReady(int shard, int bucket) {
  TESSEL_ASSIGN_OR_RETURN(absl::Span<uint8_t> wire, SparseBucket(shard, bucket));
  if (pushed_[shard][bucket] || caller_sparse_[shard][bucket]) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": bucket ", bucket, " of shard ",
                                                   shard, " was handed over twice this step"));
  }
  const Range br = ctx_->layout->bucket_range(shard, bucket);
  const int64_t k = TopkCount(ctx_->options.topk_ratio, br.size());
  if (absl::Status s = CheckSparse(wire.data(), k, br.size()); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx_->Where(), ": bucket ", bucket, " of shard ", shard, ": ", s.message()));
  }
  caller_sparse_[shard][bucket] = 1;
  // With a shuffle seed Exchange pushes it, in its random order.
  if (ctx_->options.shuffle_seed == 0) PushBucket(shard, bucket);
  return absl::OkStatus();
}

int64_t BucketExchange::unpushed() const {
  int64_t n = 0;
  for (const auto& shard : pushed_) n += std::count(shard.begin(), shard.end(), 0);
  return n;
}

void BucketExchange::PushBucket(int shard, int bucket) {
  pushed_[shard][bucket] = 1;

  const Range br = ctx_->layout->bucket_range(shard, bucket);
  const int64_t begin = br.begin;
  if (!residual_.empty()) {  // top-k: the largest of gradient + residual
    uint8_t* wire = sparse_.data() + sparse_at_[shard][bucket];
    if (!caller_sparse_[shard][bucket]) {  // else compressed by the caller (SparseReady)
      TopkCompress(buffers_.grads.data() + begin, residual_.data() + begin, br.size(),
                   TopkCount(ctx_->options.topk_ratio, br.size()), wire);
    }
    channel_->Send(channel_->Header(FrameType::kPush, ctx_->step, shard, bucket), wire);
    return;
  }
  if (aggregator_.active()) {  // fp32 only (host_groups.h)
    const float* src = buffers_.grads.data() + begin;
    {
      absl::MutexLock lock(&mu_);
      ArmLocked(ctx_->step + 1);  // the PARAMS may come from another worker before Exchange
    }
    const int to = aggregator_.AggregatorOf(shard, bucket);
    if (to == ctx_->rank.load()) {
      aggregator_.OwnReady(shard, bucket, src);
    } else {
      channel_->SendToWorker(to, channel_->Header(FrameType::kPush, ctx_->step, shard, bucket),
                             src);
    }
    return;
  }
  channel_->Send(channel_->Header(FrameType::kPush, ctx_->step, shard, bucket),
                 ctx_->half ? static_cast<const void*>(buffers_.grads_half.data() + begin)
                            : static_cast<const void*>(buffers_.grads.data() + begin));
}

void BucketExchange::SendInit(const float* source) {
  const Layout& layout = *ctx_->layout;
  for (int s = 0; s < channel_->num_shards(); ++s) {
    for (int b = 0; b < layout.num_buckets(s); ++b) {
      channel_->Send(channel_->Header(FrameType::kInit, 0, s, b),
                     source + layout.bucket_range(s, b).begin);
    }
  }
}

absl::Status BucketExchange::Exchange(int64_t version) {
  std::vector<std::pair<int, int>> todo;
  for (size_t s = 0; s < pushed_.size(); ++s) {
    for (size_t b = 0; b < pushed_[s].size(); ++b) {
      if (!pushed_[s][b]) todo.emplace_back(static_cast<int>(s), static_cast<int>(b));
    }
  }
  if (micro_batches_ > 1) {
    const float count = static_cast<float>(micro_batches_);
    for (float& g : buffers_.grads) g /= count;
  }
  micro_batches_ = 0;
  const bool shuffle = ctx_->options.shuffle_seed != 0;
  if (shuffle) std::shuffle(todo.begin(), todo.end(), shuffle_rng_);
  const absl::Time start = absl::Now();
  const bool host = aggregator_.active();
  // Host aggregation: the parameters an aggregator passes on land in the
  // other members' buffers, which their backward passes may still read, so
  // it pulls only once every member said it is here (after the pushes: no
  // member waits for another's before pushing).
  if (host) {
    channel_->ClearReceiveError();  // before the pushes: a refusal of one stands
    aggregator_.AnnouncePull(version);
  }
  if (!host) SendPulls(version, true);
  for (const auto& [shard, bucket] : todo) {
    if (shuffle && shuffle_rng_() % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(shuffle_rng_() % 2000));
    }
    PushBucket(shard, bucket);
  }
  if (host) {
    TESSEL_RETURN_IF_ERROR(aggregator_.PushAll());
    TESSEL_RETURN_IF_ERROR(aggregator_.AwaitPulls(version));
    SendPulls(version, false);
  }
  const absl::Time pushed = absl::Now();
  TESSEL_RETURN_IF_ERROR(WaitForParams(version));
  // The PARAMS passed on leave from this worker's buffers, which the caller
  // may change once Exchange returns.
  if (host) TESSEL_RETURN_IF_ERROR(channel_->WaitForWorkerSends());
  absl::MutexLock lock(&mu_);
  const absl::Time first = std::max(first_received_at_, pushed);
  const absl::Time last = std::max(last_received_at_, first);
  last_phases_.push_ns = absl::ToInt64Nanoseconds(pushed - start);
  last_phases_.wait_ns = absl::ToInt64Nanoseconds(first - pushed);
  last_phases_.pull_ns = absl::ToInt64Nanoseconds(last - first);
  if (ctx_->timeline != nullptr) {
    const int64_t first_push = channel_->TakeFirstPushUs();
    const int64_t start_us = absl::ToUnixMicros(start);
    const int64_t begin = first_push >= 0 ? std::min(first_push, start_us) : start_us;
    ctx_->timeline->Span("exchange", "exchange", begin, absl::ToUnixMicros(last),
                         {.job = ctx_->options.job, .step = version, .rank = ctx_->rank.load()});
  }
  return absl::OkStatus();
}

absl::Status BucketExchange::PushRemaining() {
  if (aggregator_.active()) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(),
                     ": a held step (clipping by the job-wide norm) cannot be pushed through "
                     "host aggregation; run without rank groups, or clip with overlap=False"));
  }
  if (micro_batches_ > 1) {
    const float count = static_cast<float>(micro_batches_);
    for (float& g : buffers_.grads) g /= count;
  }
  micro_batches_ = 0;
  for (size_t s = 0; s < pushed_.size(); ++s) {
    for (size_t b = 0; b < pushed_[s].size(); ++b) {
      if (!pushed_[s][b]) PushBucket(static_cast<int>(s), static_cast<int>(b));
    }
  }
  return absl::OkStatus();
}

absl::Status BucketExchange::Pull(int64_t version) {
  SendPulls(version, /*all=*/true);
  return WaitForParams(version);
}

void BucketExchange::ArmLocked(int64_t version) {
  if (expect_version_ == version && expect_epoch_ == ctx_->epoch.load()) return;
  const Layout& layout = *ctx_->layout;
  const int shards = channel_->num_shards();
  int64_t expected = 0;
  for (int s = 0; s < shards; ++s) expected += layout.num_buckets(s);
  expect_version_ = version;
  expect_epoch_ = ctx_->epoch.load();
  expected_ = expected;
  received_ = 0;
  received_by_shard_.assign(static_cast<size_t>(shards), 0);
}

void BucketExchange::SendPulls(int64_t version, bool all) {
  const Layout& layout = *ctx_->layout;
  const int shards = channel_->num_shards();
  {
    absl::MutexLock lock(&mu_);
    if (all) expect_version_ = -1;  // count afresh
    ArmLocked(version);
    forward_version_ = all ? -1 : version;
  }
  if (all) channel_->ClearReceiveError();  // host aggregation: cleared before its pushes
  for (int s = 0; s < shards; ++s) {
    int first = 0, count = layout.num_buckets(s);
    if (!all) aggregator_.PullRange(s, &first, &count);
    if (count == 0) continue;
    FrameHeader h = channel_->Header(FrameType::kPull, version, s, first);
    h.bucket_count = static_cast<uint32_t>(count);
    channel_->Send(h, nullptr);
  }
}

absl::Status BucketExchange::WaitForParams(int64_t version) {
  return channel_->WaitFor(
      [&] {
        absl::MutexLock lock(&mu_);
        return PulledLocked();
      },
      [&] {
        const Layout& layout = *ctx_->layout;
        std::vector<std::string> missing;
        absl::MutexLock lock(&mu_);
        for (int s = 0; s < channel_->num_shards(); ++s) {
          const int want = layout.num_buckets(s);
          if (received_by_shard_[s] < want) {
            missing.push_back(absl::StrCat("shard ", s, " (", channel_->address(s),
                                           "): ", received_by_shard_[s], "/", want, " buckets"));
          }
        }
        return absl::StrCat("parameters of step ", version, " (missing ",
                            absl::StrJoin(missing, ", "), ")");
      });
}

void BucketExchange::NextStep() {
  for (auto& v : ready_elems_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : pushed_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : caller_sparse_) std::fill(v.begin(), v.end(), 0);
  micro_batches_ = 0;
}

void BucketExchange::Reset() {
  // A recovery replays from the servers' state: what was held back for
  // steps that are rolled back is dropped with them.
  std::fill(residual_.begin(), residual_.end(), 0.f);
  {
    absl::MutexLock lock(&mu_);
    expect_version_ = -1;  // accept no PARAMS until the rollback's pull
    forward_version_ = -1;
    received_ = 0;
    expected_ = 0;
  }
  NextStep();
  aggregator_.Reset();
}

void BucketExchange::Retire(bool stuck, std::vector<PayloadVector<float>>* retired,
                            std::vector<PayloadVector<uint16_t>>* retired_half) {
  if (!stuck) return;
  aggregator_.Retire(stuck, retired);
  absl::MutexLock lock(&mu_);  // OnParams reads where the buffers lie
  // DDP receives the averaged gradient; its parameters are its own state.
  PayloadVector<float>& target = ctx_->ddp() ? buffers_.grads : buffers_.params;
  if (!target.empty()) {
    retired->push_back(std::move(target));
    target.assign(retired->back().size(), 0.f);
  }
  PayloadVector<uint16_t>& target_half = ctx_->ddp() ? buffers_.grads_half : buffers_.params_half;
  if (!target_half.empty()) {
    retired_half->push_back(std::move(target_half));
    target_half.assign(retired_half->back().size(), 0);
  }
}

Accept BucketExchange::OnParams(const FrameHeader& h) {
  const Layout& layout = *ctx_->layout;
  const Range br = layout.bucket_range(h.shard, h.bucket);
  // Asked before taking mu_ (never held around a call into the aggregator):
  // whether this rank passes the bucket on to the host's other workers.
  const bool aggregates = aggregator_.Forwards(h.shard, h.bucket);
  absl::MutexLock lock(&mu_);
  if (h.step != expect_version_ || h.epoch != expect_epoch_ ||
      h.payload_bytes != DensePayloadBytes(br.size(), ctx_->half.has_value())) {
    TESSEL_LOG(WARNING) << "dropping stale or mis-sized " << DescribeHeader(h)
                        << " (expecting step " << expect_version_ << ", epoch " << expect_epoch_
                        << ")";
    channel_->CountStale();
    return Accept{};
  }
  // ZeRO pulls parameters; DDP pulls the averaged gradient.
  const bool ddp = ctx_->ddp();
  void* dst =
      ctx_->half
          ? static_cast<void*>((ddp ? buffers_.grads_half.data() : buffers_.params_half.data()) +
                               br.begin)
          : static_cast<void*>((ddp ? buffers_.grads.data() : buffers_.params.data()) + br.begin);
  const bool forwards = forward_version_ == h.step && aggregates;
  // h.payload_bytes is the bucket's size (checked above) and what arrived
  // (DataChannel::OnFrame): the room the transport may fill.
  return channel_->Receive(dst, h.payload_bytes, h.epoch,
                           [this, h, dst, forwards] { Landed(h, dst, forwards); });
}

void BucketExchange::Landed(const FrameHeader& h, void* dst, bool forwards) {
  const absl::Time now = absl::Now();
  bool done = false;
  {
    absl::MutexLock lock(&mu_);
    // A recovery re-armed (or disarmed) the pull since the frame was taken.
    if (h.step != expect_version_ || h.epoch != expect_epoch_) return;
    // Exchange waits for the pass-on too: it is counted with the arrival, so
    // the step cannot look complete before the pass-on's sends are counted.
    if (forwards) ++forwarding_;
    if (received_ == 0) first_received_at_ = now;
    last_received_at_ = now;
    ++received_;
    ++received_by_shard_[static_cast<size_t>(h.shard)];
    done = PulledLocked();
  }
  if (ctx_->timeline != nullptr) {
    ctx_->timeline->Instant("params", "exchange", absl::ToUnixMicros(now),
                            {.job = ctx_->options.job,
                             .step = h.step,
                             .rank = ctx_->rank.load(),
                             .shard = static_cast<int>(h.shard),
                             .bucket = static_cast<int>(h.bucket)});
  }
  if (forwards) {
    aggregator_.Forward(h, dst);  // counted in the channel's sends from here
    absl::MutexLock lock(&mu_);
    --forwarding_;
    done = PulledLocked();
  }
  if (done) channel_->Notify();
}

}  // namespace tessel::internal
