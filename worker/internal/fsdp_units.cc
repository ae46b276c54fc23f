#include "worker/internal/fsdp_units.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/precision.h"
#include "core/status_macros.h"
#include "core/wire.h"
#include "runtime/log.h"

namespace tessel::internal {

const char* UnitStateName(UnitState state) {
  switch (state) {
    case UnitState::kReleased:
      return "released";
    case UnitState::kGathering:
      return "gathering";
    case UnitState::kGathered:
      return "gathered";
  }
  return "?";
}

absl::Status CheckUnitTransition(UnitState from, UnitState to) {
  using S = UnitState;
  const bool ok = (from == S::kReleased && to == S::kGathering) ||
                  (from == S::kGathering && to == S::kGathered) ||
                  (from != S::kReleased && to == S::kReleased);
  if (ok) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("an fsdp unit cannot go from ", UnitStateName(from), " to ", UnitStateName(to)));
}

FsdpUnits::FsdpUnits(JobContext* ctx, DataChannel* channel) : ctx_(ctx), channel_(channel) {}

absl::Status FsdpUnits::Init() {
  const std::vector<int>& firsts = ctx_->options.fsdp_units;
  if (firsts.empty() || firsts.front() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx_->Where(), ": fsdp needs WorkerOptions.fsdp_units starting at tensor 0"));
  }
  const Layout& layout = *ctx_->layout;
  const auto& tensors = layout.tensors();
  std::vector<Unit> units;
  std::vector<int64_t> starts;
  for (size_t i = 0; i < firsts.size(); ++i) {
    const int first = firsts[i];
    const int end = i + 1 < firsts.size() ? firsts[i + 1] : static_cast<int>(tensors.size());
    Unit u;
    u.range =
        Range{tensors[first].offset,
              end < static_cast<int>(tensors.size()) ? tensors[end].offset : layout.num_params()};
    for (int s = 0; s < channel_->num_shards(); ++s) {
      u.buckets.push_back(layout.BucketsIn(s, u.range));
    }
    starts.push_back(u.range.begin);
    units.push_back(std::move(u));
  }
  absl::MutexLock lock(&mu_);
  units_ = std::move(units);
  unit_starts_ = std::move(starts);
  return absl::OkStatus();
}

UnitState FsdpUnits::state(int unit) const {
  absl::MutexLock lock(&mu_);
  if (unit < 0 || unit >= static_cast<int>(units_.size())) return UnitState::kReleased;
  return units_[static_cast<size_t>(unit)].state;
}

void FsdpUnits::MoveLocked(int unit, UnitState to) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (absl::Status s = CheckUnitTransition(u.state, to); !s.ok()) {
    TESSEL_LOG(ERROR) << ctx_->WhereAnyThread() << ": internal error: unit " << unit << ": "
                      << s.message();
    std::abort();
  }
  u.state = to;
}

int64_t FsdpUnits::ParamBytes(const Unit& u) {
  return static_cast<int64_t>(u.params.capacity() * sizeof(float) +
                              u.params_half.capacity() * sizeof(uint16_t));
}

int64_t FsdpUnits::GradBytes(const Unit& u) {
  int64_t bytes = 0;
  if (u.grads) bytes += static_cast<int64_t>(u.grads->capacity() * sizeof(float));
  if (u.grads_half) bytes += static_cast<int64_t>(u.grads_half->capacity() * sizeof(uint16_t));
  return bytes;
}

void FsdpUnits::AccountLocked() {
  int64_t bytes = 0, grads = 0;
  for (const Unit& u : units_) {
    bytes += ParamBytes(u) + GradBytes(u);
    grads += GradBytes(u);
  }
  for (const auto& p : parked_) bytes += static_cast<int64_t>(p.capacity() * sizeof(float));
  for (const auto& p : parked_half_) {
    bytes += static_cast<int64_t>(p.capacity() * sizeof(uint16_t));
  }
  held_bytes_ = bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes);
  peak_grads_bytes_ = std::max(peak_grads_bytes_, grads);
}

int64_t FsdpUnits::AddHeldBytes(int64_t* params, int64_t* grads, int64_t* peak_grads) {
  absl::MutexLock lock(&mu_);
  for (const Unit& u : units_) {
    *params += ParamBytes(u);
    *grads += GradBytes(u);
  }
  *peak_grads = peak_grads_bytes_;
  return peak_bytes_;
}

absl::Status FsdpUnits::CheckUnit(int unit) const {
  if (!ctx_->fsdp() || ctx_->layout == nullptr || unit < 0 || unit >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(ctx_->Where(), ": no fsdp unit ", unit));
  }
  return absl::OkStatus();
}

absl::Status FsdpUnits::Prefetch(int unit) {
  TESSEL_RETURN_IF_ERROR(CheckUnit(unit));
  const int64_t step = ctx_->step;
  const int64_t epoch = ctx_->epoch.load();
  bool stale = false;
  {
    absl::MutexLock lock(&mu_);
    const Unit& u = units_[static_cast<size_t>(unit)];
    if (u.state != UnitState::kReleased) {
      if (u.version == step && u.epoch == epoch) return absl::OkStatus();  // held or in flight
      stale = true;
    }
  }
  if (stale) Release(unit);  // held for another step: let its buckets land first
  Unit& u = units_[static_cast<size_t>(unit)];
  {
    absl::MutexLock lock(&mu_);
    if (ctx_->half) {
      u.params_half.assign(static_cast<size_t>(u.range.size()), 0);
    } else {
      u.params.assign(static_cast<size_t>(u.range.size()), 0.f);
    }
    u.version = step;
    u.epoch = epoch;
    u.received = 0;
    u.expected = 0;
    for (const auto& b : u.buckets) u.expected += b.second;
    MoveLocked(unit, UnitState::kGathering);
    if (u.expected == 0) MoveLocked(unit, UnitState::kGathered);
    AccountLocked();
  }
  for (int s = 0; s < channel_->num_shards(); ++s) {
    const auto [first, count] = u.buckets[static_cast<size_t>(s)];
    if (count == 0) continue;
    FrameHeader h = channel_->Header(FrameType::kPull, step, s, first);
    h.bucket_count = static_cast<uint32_t>(count);
    channel_->Send(h, nullptr);
  }
  return absl::OkStatus();
}

absl::Status FsdpUnits::WaitForUnit(int unit) {
  TESSEL_RETURN_IF_ERROR(Prefetch(unit));
  return channel_->WaitFor(
      [&] { return state(unit) == UnitState::kGathered; },
      [&] { return absl::StrCat("gathering unit ", unit, " at step ", ctx_->step); });
}

absl::StatusOr<absl::Span<const float>> FsdpUnits::Gather(int unit) {
  if (ctx_->half) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx_->Where(), ": a mixed-precision job holds half parameters: use GatherHalf"));
  }
  TESSEL_RETURN_IF_ERROR(WaitForUnit(unit));
  absl::MutexLock lock(&mu_);
  return absl::MakeConstSpan(units_[static_cast<size_t>(unit)].params);
}

absl::StatusOr<absl::Span<const uint16_t>> FsdpUnits::GatherHalf(int unit) {
  if (!ctx_->half) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": GatherHalf is for mixed-precision jobs; use Gather"));
  }
  TESSEL_RETURN_IF_ERROR(WaitForUnit(unit));
  absl::MutexLock lock(&mu_);
  return absl::MakeConstSpan(units_[static_cast<size_t>(unit)].params_half);
}

void FsdpUnits::Release(int unit) {
  if (unit < 0 || unit >= size()) return;
  absl::Status s = channel_->WaitFor([&] { return state(unit) != UnitState::kGathering; },
                                     [] { return "releasing a unit"; });
  absl::MutexLock lock(&mu_);
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.state == UnitState::kReleased) return;
  const bool landing = u.state == UnitState::kGathering;
  if (landing) {
    // The step has failed already (the caller sees it at its next wait).
    TESSEL_LOG(WARNING) << ctx_->Where() << ": releasing unit " << unit << " with "
                        << u.expected - u.received << " of its buckets not landed: " << s.message();
  }
  ReleaseLocked(unit, landing);
  AccountLocked();
}

void FsdpUnits::ReleaseLocked(int unit, bool landing) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (landing) {
    if (!u.params.empty()) parked_.push_back(std::move(u.params));
    if (!u.params_half.empty()) parked_half_.push_back(std::move(u.params_half));
  }
  std::vector<float>().swap(u.params);
  std::vector<uint16_t>().swap(u.params_half);
  u.version = -1;
  u.epoch = -1;
  MoveLocked(unit, UnitState::kReleased);
}

absl::Span<uint16_t> FsdpUnits::HalfGrads(int unit) {
  if (!ctx_->unit_grads() || !ctx_->half || unit < 0 || unit >= size()) return {};
  absl::MutexLock lock(&mu_);
  Unit& u = units_[static_cast<size_t>(unit)];
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
      TESSEL_ASSIGN_OR_RETURN(absl::Span<const uint16_t> p, GatherHalf(u));
      HalfToFloat(*ctx_->half, p.data(), dst, p.size());
    } else {
      TESSEL_ASSIGN_OR_RETURN(absl::Span<const float> p, Gather(u));
      std::copy(p.begin(), p.end(), dst);
    }
    Release(u);
  }
  return absl::OkStatus();
}

absl::Span<float> FsdpUnits::Grads(int unit) {
  if (!ctx_->unit_grads() || ctx_->half || unit < 0 || unit >= size()) return {};
  absl::MutexLock lock(&mu_);
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.grads == nullptr) {
    u.grads = std::make_shared<std::vector<float>>(static_cast<size_t>(u.range.size()), 0.f);
    AccountLocked();
  }
  return absl::MakeSpan(*u.grads);
}

void FsdpUnits::SkipPushed(int64_t version, std::vector<std::vector<uint8_t>> on_shards) {
  skip_version_ = version;
  skip_ = std::move(on_shards);
}

absl::Status FsdpUnits::Push(int unit, const std::function<void(int shard, int bucket)>& pushed,
                             bool part) {
  std::shared_ptr<std::vector<float>> grads;
  std::shared_ptr<std::vector<uint16_t>> grads_half;
  int parts = 0;
  if (ctx_->unit_grads() && unit >= 0 && unit < size()) {
    absl::MutexLock lock(&mu_);
    const Unit& u = units_[static_cast<size_t>(unit)];
    grads = u.grads;
    grads_half = u.grads_half;
    parts = u.parts;
  }
  if (grads == nullptr && grads_half == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": PushUnit(", unit, ") without ",
                     ctx_->half ? "UnitHalfGrads(" : "UnitGrads(", unit, ")"));
  }
  if (part && parts >= static_cast<int>(kMaxPushParts)) {
    return absl::FailedPreconditionError(
        absl::StrCat(ctx_->Where(), ": PushUnitPart(", unit, "): at most ", kMaxPushParts,
                     " micro-batch parts a step (core/wire.h); accumulate on the worker"));
  }
  if (parts > 0) channel_->WaitForSends();  // the unit's earlier part is out
  Unit& u = units_[static_cast<size_t>(unit)];
  {
    absl::MutexLock lock(&mu_);
    u.grads.reset();
    u.grads_half.reset();
  }
  const bool skipping = skip_version_ == ctx_->step && !skip_.empty();
  for (int s = 0; s < channel_->num_shards(); ++s) {
    const auto [first, count] = u.buckets[static_cast<size_t>(s)];
    for (int b = first; b < first + count; ++b) {
      if (!part) pushed(s, b);
      if (skipping && static_cast<size_t>(s) < skip_.size() &&
          static_cast<size_t>(b) < skip_[s].size() && skip_[s][b]) {
        continue;  // on the shards from this rank's previous process
      }
      FrameHeader h = channel_->Header(FrameType::kPush, ctx_->step, s, b);
      // Numbered, so a server takes each part once.
      if (part) h.bucket_count = PushPartCount(static_cast<uint32_t>(parts));
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
  absl::MutexLock lock(&mu_);
  u.parts = part ? u.parts + 1 : 0;
  AccountLocked();
  return absl::OkStatus();
}

absl::Status FsdpUnits::Barrier(int64_t version) {
  const Layout& layout = *ctx_->layout;
  {
    int64_t shards = 0;
    for (int s = 0; s < channel_->num_shards(); ++s) shards += layout.num_buckets(s) > 0;
    absl::MutexLock lock(&mu_);
    sync_received_ = 0;
    sync_version_ = version;
    sync_expected_ = shards;
  }
  for (int s = 0; s < channel_->num_shards(); ++s) {
    if (layout.num_buckets(s) == 0) continue;
    channel_->Send(channel_->Header(FrameType::kPull, version, s, 0), nullptr);  // notify only
  }
  return channel_->WaitFor(
      [&] {
        absl::MutexLock lock(&mu_);
        return sync_received_ == sync_expected_;
      },
      [&] { return absl::StrCat("step ", version, " on every shard"); });
}

void FsdpUnits::Reset() {
  skip_version_ = -1;
  skip_.clear();
  absl::MutexLock lock(&mu_);
  sync_version_ = -1;
  sync_received_ = 0;
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.grads.reset();
    u.grads_half.reset();
    u.parts = 0;
    u.received = 0;
    u.expected = 0;
    // A unit still gathering may be written into: parked until Retire.
    if (u.state != UnitState::kReleased) {
      ReleaseLocked(static_cast<int>(i), u.state == UnitState::kGathering);
    }
  }
  AccountLocked();
}

void FsdpUnits::Retire(bool stuck, std::vector<std::vector<float>>* retired,
                       std::vector<std::vector<uint16_t>>* retired_half) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < units_.size(); ++i) {
    if (units_[i].state != UnitState::kReleased) {
      ReleaseLocked(static_cast<int>(i), units_[i].state == UnitState::kGathering);
    }
  }
  if (stuck) {
    for (auto& p : parked_) retired->push_back(std::move(p));
    for (auto& p : parked_half_) retired_half->push_back(std::move(p));
  }
  parked_.clear();
  parked_half_.clear();
  AccountLocked();
}

Accept FsdpUnits::OnParams(const FrameHeader& h) {
  if (h.epoch != ctx_->epoch.load()) {
    channel_->CountStale();
    return Accept{};
  }
  if (h.bucket_count == 0) {  // a shard reached the step Barrier waits for
    bool done = false;
    {
      absl::MutexLock lock(&mu_);
      if (h.step == sync_version_) ++sync_received_;
      done = h.step == sync_version_ && sync_received_ == sync_expected_;
    }
    if (done) channel_->Notify();
    return Accept{};
  }
  const Layout& layout = *ctx_->layout;
  const Range br = layout.bucket_range(h.shard, h.bucket);
  const int unit =
      static_cast<int>(std::upper_bound(unit_starts_.begin(), unit_starts_.end(), br.begin) -
                       unit_starts_.begin()) -
      1;
  absl::MutexLock lock(&mu_);
  if (unit < 0) {
    channel_->CountStale();
    return Accept{};
  }
  Unit& u = units_[static_cast<size_t>(unit)];
  if (u.state != UnitState::kGathering || u.version != h.step || u.epoch != h.epoch ||
      br.end > u.range.end ||
      h.payload_bytes != DensePayloadBytes(br.size(), ctx_->half.has_value())) {
    TESSEL_LOG(WARNING) << "dropping stale " << DescribeHeader(h) << " (unit " << unit << " "
                        << UnitStateName(u.state) << ")";
    channel_->CountStale();
    return Accept{};
  }
  const size_t at = static_cast<size_t>(br.begin - u.range.begin);
  void* dst = ctx_->half ? static_cast<void*>(u.params_half.data() + at)
                         : static_cast<void*>(u.params.data() + at);
  const int64_t epoch = h.epoch;
  const int64_t version = h.step;
  return channel_->Receive(dst, h.payload_bytes, epoch,  // the bucket's size, checked above
                           [this, unit, epoch, version] { Landed(unit, epoch, version); });
}

void FsdpUnits::Landed(int unit, int64_t epoch, int64_t version) {
  {
    absl::MutexLock lock(&mu_);
    Unit& u = units_[static_cast<size_t>(unit)];
    // Released or pulled again since the frame was taken (a recovery).
    if (u.state != UnitState::kGathering || u.epoch != epoch || u.version != version) return;
    if (++u.received < u.expected) return;
    MoveLocked(unit, UnitState::kGathered);
  }
  channel_->Notify();
}

}  // namespace tessel::internal
