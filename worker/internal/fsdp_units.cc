#include "core/wire.h"
#include "worker/internal/fsdp_units.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/log.h"
#include "core/precision.h"

namespace tessel::internal {

FsdpUnits::FsdpUnits(JobContext* ctx, DataChannel* channel) : ctx_(ctx), channel_(channel) {}

absl::Status FsdpUnits::Init() {
  const std::vector<int>& firsts = ctx_->options.fsdp_units;
  if (firsts.empty() || firsts.front() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx_->Where(), ": fsdp needs WorkerOptions.fsdp_units starting at tensor 0"));
  }
  const Layout& layout = *ctx_->layout;
  const auto& tensors = layout.tensors();
  units_.clear();
  unit_starts_.clear();
  for (size_t i = 0; i < firsts.size(); ++i) {
    const int first = firsts[i];
    const int end = i + 1 < firsts.size() ? firsts[i + 1] : static_cast<int>(tensors.size());
    Unit u;
    u.range =
        Range{tensors[first].offset,
              end < static_cast<int>(tensors.size()) ? tensors[end].offset : layout.num_params()};
    for (int s = 0; s < channel_->num_shards(); ++s)
      u.buckets.push_back(layout.BucketsIn(s, u.range));
    unit_starts_.push_back(u.range.begin);
    units_.push_back(std::move(u));
  }
  return absl::OkStatus();
}

int64_t FsdpUnits::Bytes(const Unit& u) {
  int64_t bytes = static_cast<int64_t>(u.params.capacity() * sizeof(float) +
                                       u.params_half.capacity() * sizeof(uint16_t));
  if (u.grads) bytes += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
  if (u.grads_half) bytes += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
  return bytes;
}

void FsdpUnits::AccountLocked() {
  int64_t bytes = 0, grads = 0;
  for (const Unit& u : units_) {
    bytes += Bytes(u);
    if (u.grads) grads += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
    if (u.grads_half) grads += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
  }
  held_bytes_ = bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes);
  peak_grads_bytes_ = std::max(peak_grads_bytes_, grads);
}

int64_t FsdpUnits::AddHeldBytes(int64_t* params, int64_t* grads, int64_t* peak_grads) {
  absl::MutexLock lock(&channel_->mu());
  for (const Unit& u : units_) {
    *params += static_cast<int64_t>(u.params.capacity() * sizeof(float) +
                                    u.params_half.capacity() * sizeof(uint16_t));
    if (u.grads) *grads += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
    if (u.grads_half) *grads += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
  }
  *peak_grads = peak_grads_bytes_;
  return peak_bytes_;
}

absl::Status FsdpUnits::Prefetch(int unit) {
  if (!ctx_->fsdp() || ctx_->layout == nullptr || unit < 0 || unit >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": no fsdp unit ", unit));
  }
  Unit& u = units_[unit];
  const int64_t step = ctx_->step;
  {
    absl::MutexLock lock(&channel_->mu());
    if (u.version == step && (!u.params.empty() || !u.params_half.empty())) {
      return absl::OkStatus();  // held or in flight
    }
    if (ctx_->half) {
      u.params_half.assign(static_cast<size_t>(u.range.size()), 0);
    } else {
      u.params.assign(static_cast<size_t>(u.range.size()), 0.f);
    }
    u.version = step;
    u.received = 0;
    u.expected = 0;
    for (const auto& b : u.buckets) u.expected += b.second;
    AccountLocked();
  }
  for (int s = 0; s < channel_->num_shards(); ++s) {
    const auto [first, count] = u.buckets[s];
    if (count == 0) continue;
    FrameHeader h = channel_->Header(FrameType::kPull, step, s, first);
    h.bucket_count = static_cast<uint32_t>(count);
    channel_->Send(h, nullptr);
  }
  return absl::OkStatus();
}

absl::Status FsdpUnits::WaitForUnit(int unit) {
  absl::Status s = Prefetch(unit);
  if (!s.ok()) return s;
  Unit& u = units_[unit];
  return channel_->WaitFor(
      [&] { return u.received == u.expected; },
      [&] { return absl::StrCat("gathering unit ", unit, " at step ", ctx_->step); });
}

absl::StatusOr<absl::Span<const float>> FsdpUnits::Gather(int unit) {
  if (ctx_->half) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx_->Where(), ": a mixed-precision job holds half parameters: use GatherHalf"));
  }
  absl::Status s = WaitForUnit(unit);
  if (!s.ok()) return s;
  return absl::MakeConstSpan(units_[unit].params);
}

absl::StatusOr<absl::Span<const uint16_t>> FsdpUnits::GatherHalf(int unit) {
  if (!ctx_->half) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": GatherHalf is for mixed-precision jobs; use Gather"));
  }
  absl::Status s = WaitForUnit(unit);
  if (!s.ok()) return s;
  return absl::MakeConstSpan(units_[unit].params_half);
}

void FsdpUnits::Release(int unit) {
  if (unit < 0 || unit >= size()) return;
  Unit& u = units_[unit];
  absl::Status s = channel_->WaitFor([&] { return u.received == u.expected; },
                                     [] { return "releasing a unit"; });
  absl::MutexLock lock(&channel_->mu());
  if (!s.ok()) {
    // The step has failed already (the caller sees it at its next wait).
    TESSEL_LOG(WARNING) << ctx_->Where() << ": releasing unit " << unit << " with "
                        << u.expected - u.received << " of its buckets not landed: " << s.message();
  }
  std::vector<float>().swap(u.params);
  std::vector<uint16_t>().swap(u.params_half);
  u.version = -1;
  AccountLocked();
}

absl::Span<uint16_t> FsdpUnits::HalfGrads(int unit) {
  if (!ctx_->unit_grads() || !ctx_->half || unit < 0 || unit >= size()) return {};
  Unit& u = units_[unit];
  absl::MutexLock lock(&channel_->mu());
  if (u.grads_half == nullptr) {
    u.grads_half = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(u.range.size()), 0);
    AccountLocked();
  }
  return absl::MakeSpan(*u.grads_half);
}

absl::Status FsdpUnits::GatherAll(absl::Span<float> all) {
  for (int u = 0; u < size(); ++u) {
    float* dst = all.data() + range(u).begin;
    if (ctx_->half) {
      auto p = GatherHalf(u);
      if (!p.ok()) return p.status();
      HalfToFloat(*ctx_->half, p->data(), dst, p->size());
    } else {
      auto p = Gather(u);
      if (!p.ok()) return p.status();
      std::copy(p->begin(), p->end(), dst);
    }
    Release(u);
  }
  return absl::OkStatus();
}

absl::Span<float> FsdpUnits::Grads(int unit) {
  if (!ctx_->unit_grads() || ctx_->half || unit < 0 || unit >= size()) return {};
  Unit& u = units_[unit];
  absl::MutexLock lock(&channel_->mu());
  if (u.grads == nullptr) {
    u.grads = std::make_shared<std::vector<float>>(static_cast<size_t>(u.range.size()), 0.f);
    AccountLocked();
  }
  return absl::MakeSpan(*u.grads);
}

absl::Status FsdpUnits::Push(int unit, const std::function<void(int shard, int bucket)>& pushed,
                             bool part) {
  if (!ctx_->unit_grads() || unit < 0 || unit >= size() ||
      (units_[unit].grads == nullptr && units_[unit].grads_half == nullptr)) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": PushUnit(", unit, ") without ",
                     ctx_->half ? "UnitHalfGrads(" : "UnitGrads(", unit, ")"));
  }
  if (part && ctx_->half) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": PushUnitPart(", unit,
                     "): the servers sum micro-batch parts in float32 only; "
                     "accumulate half gradients on the worker"));
  }
  Unit& u = units_[unit];
  if (u.parts > 0) channel_->WaitForSends();  // the unit's earlier part is out
  std::shared_ptr<std::vector<float>> grads;
  std::shared_ptr<std::vector<uint16_t>> grads_half;
  {
    absl::MutexLock lock(&channel_->mu());
    grads = std::move(u.grads);
    grads_half = std::move(u.grads_half);
    u.grads.reset();
    u.grads_half.reset();
  }
  for (int s = 0; s < channel_->num_shards(); ++s) {
    const auto [first, count] = u.buckets[s];
    for (int b = first; b < first + count; ++b) {
      if (!part) pushed(s, b);
      FrameHeader h = channel_->Header(FrameType::kPush, ctx_->step, s, b);
      if (part) h.bucket_count = kPushPart;
      const Range br = ctx_->layout->bucket_range(s, b);
      // The buffer lives until its last bucket is sent, then is freed.
      const size_t at = static_cast<size_t>(br.begin - u.range.begin);
      if (grads_half) {
        channel_->Send(h, grads_half->data() + at, grads_half);
      } else {
        channel_->Send(h, grads->data() + at, grads);
      }
    }
  }
  grads.reset();
  grads_half.reset();
  u.parts = part ? u.parts + 1 : 0;
  absl::MutexLock lock(&channel_->mu());
  AccountLocked();
  return absl::OkStatus();
}

absl::Status FsdpUnits::Barrier(int64_t version) {
  const Layout& layout = *ctx_->layout;
  {
    int64_t shards = 0;
    for (int s = 0; s < channel_->num_shards(); ++s) shards += layout.num_buckets(s) > 0;
    absl::MutexLock lock(&channel_->mu());
    sync_received_ = 0;
    sync_version_ = version;
    sync_expected_ = shards;
  }
  for (int s = 0; s < channel_->num_shards(); ++s) {
    if (layout.num_buckets(s) == 0) continue;
    channel_->Send(channel_->Header(FrameType::kPull, version, s, 0), nullptr);  // notify only
  }
  return channel_->WaitFor([&] { return sync_received_ == sync_expected_; },
                           [&] { return absl::StrCat("step ", version, " on every shard"); });
}

void FsdpUnits::Reset() {
  absl::MutexLock lock(&channel_->mu());
  sync_version_ = -1;
  sync_received_ = 0;
  for (Unit& u : units_) {  // held parameters are freed (or retired) by RetireLocked
    u.grads.reset();
    u.grads_half.reset();
    u.version = -1;
    u.received = 0;
    u.expected = 0;
  }
  AccountLocked();
}

void FsdpUnits::RetireLocked(bool stuck, std::vector<std::vector<float>>* retired,
                             std::vector<std::vector<uint16_t>>* retired_half) {
  for (Unit& u : units_) {
    if (stuck && !u.params.empty()) retired->push_back(std::move(u.params));
    if (stuck && !u.params_half.empty()) retired_half->push_back(std::move(u.params_half));
    std::vector<float>().swap(u.params);
    std::vector<uint16_t>().swap(u.params_half);
  }
  AccountLocked();
}

Accept FsdpUnits::OnParams(const FrameHeader& h) {
  if (h.epoch != ctx_->epoch.load()) {
    absl::MutexLock lock(&channel_->mu());
    channel_->CountStaleLocked();
    return Accept{};
  }
  if (h.bucket_count == 0) {  // a shard reached the step Barrier waits for
    absl::MutexLock lock(&channel_->mu());
    if (h.step == sync_version_) ++sync_received_;
    return Accept{};
  }
  const Layout& layout = *ctx_->layout;
  const Range br = layout.bucket_range(h.shard, h.bucket);
  const int unit =
      static_cast<int>(std::upper_bound(unit_starts_.begin(), unit_starts_.end(), br.begin) -
                       unit_starts_.begin()) -
      1;
  absl::MutexLock lock(&channel_->mu());
  Unit& u = units_[unit];
  const bool held = ctx_->half ? !u.params_half.empty() : !u.params.empty();
  if (u.version != h.step || !held || br.end > u.range.end ||
      h.payload_bytes != DensePayloadBytes(br.size(), ctx_->half.has_value())) {
    TESSEL_LOG(WARNING) << "dropping stale " << DescribeHeader(h);
    channel_->CountStaleLocked();
    return Accept{};
  }
  const size_t at = static_cast<size_t>(br.begin - u.range.begin);
  void* dst = ctx_->half ? static_cast<void*>(u.params_half.data() + at)
                         : static_cast<void*>(u.params.data() + at);
  return channel_->Receive(dst, h.epoch, [this, unit] { ++units_[unit].received; });
}

}  // namespace tessel::internal
