#include "worker/internal/ddp_state.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/digest.h"
#include "core/status_macros.h"

namespace tessel::internal {

void DdpState::Init(size_t n, bool holds) {
  holds_ = holds;
  slots_.assign(static_cast<size_t>(StateSlots(optimizer_)), std::vector<float>(n, 0.f));
  float* state[kMaxStateSlots] = {};
  for (size_t k = 0; k < slots_.size(); ++k) state[k] = slots_[k].data();
  InitState(optimizer_, state, n);
}

absl::Status DdpState::Apply(int64_t step, std::optional<HalfType> half, const Layout& layout,
                             ModelBuffers* b) {
  const Range all{0, static_cast<int64_t>(b->params.size())};
  runs_.clear();
  ForEachUpdateRun(layout, all, step, skips_, skip_now_, [&](Range run, int64_t t_step) {
    runs_.push_back({run, t_step});
  });
  AdvanceSkips(skip_now_, &skips_);
  skip_now_.clear();
  if (updater_ != nullptr) return updater_->Apply(optimizer_, runs_);
  constexpr size_t kChunk = 16384;
  std::vector<float> widened(half ? std::min(kChunk, b->params.size()) : 0);
  float* state[kMaxStateSlots] = {};
  for (const DdpUpdater::Run& r : runs_) {
    const Range run = r.range;
    if (!half) {
      const size_t at = static_cast<size_t>(run.begin);
      for (size_t k = 0; k < slots_.size(); ++k) state[k] = slots_[k].data() + at;
      ApplyUpdate(optimizer_, r.step, b->params.data() + at, b->grads.data() + at, state,
                  static_cast<size_t>(run.size()));
      continue;
    }
    for (size_t begin = static_cast<size_t>(run.begin); begin < static_cast<size_t>(run.end);
         begin += kChunk) {
      const size_t n = std::min(kChunk, static_cast<size_t>(run.end) - begin);
      HalfToFloat(*half, b->grads_half.data() + begin, widened.data(), n);
      for (size_t k = 0; k < slots_.size(); ++k) state[k] = slots_[k].data() + begin;
      ApplyUpdate(optimizer_, r.step, b->params.data() + begin, widened.data(), state, n);
      FloatToHalf(*half, b->params.data() + begin, b->params_half.data() + begin, n);
    }
  }
  return absl::OkStatus();
}

absl::Status DdpState::SyncToHost(std::optional<HalfType> half, ModelBuffers* b) {
  if (updater_ == nullptr) return absl::OkStatus();
  std::vector<float*> slots;
  for (auto& slot : slots_) slots.push_back(slot.data());
  absl::Status s = updater_->Store(b->params.data(), slots);
  if (s.ok() && half) FloatToHalf(*half, b->params.data(), b->params_half.data(), b->params.size());
  return s;
}

absl::Status DdpState::InstallUpdater(DdpUpdater* updater, std::optional<HalfType> half,
                                      ModelBuffers* buffers) {
  if (updater == updater_) return absl::OkStatus();
  TESSEL_RETURN_IF_ERROR(SyncToHost(half, buffers));
  DdpUpdater* old = updater_;
  updater_ = updater;
  absl::Status s = SyncFromHost(*buffers);
  if (!s.ok()) updater_ = old;
  return s;
}

absl::Status DdpState::SyncFromHost(const ModelBuffers& b) {
  if (updater_ == nullptr) return absl::OkStatus();
  std::vector<const float*> slots;
  for (const auto& slot : slots_) slots.push_back(slot.data());
  return updater_->Load(b.params.data(), slots);
}

uint64_t DdpState::Digest(int64_t step, absl::Span<const float> params) const {
  tessel::Digest d;
  d.UpdateInt(step);
  d.Update(params.data(), params.size() * sizeof(float));
  for (const auto& slot : slots_) d.Update(slot.data(), slot.size() * sizeof(float));
  if (!skips_.empty()) d.Update(skips_.data(), skips_.size() * sizeof(int64_t));
  return d.value();
}

int64_t DdpState::bytes() const {
  int64_t b = 0;
  for (const auto& s : slots_) b += static_cast<int64_t>(s.size() * sizeof(float));
  return b;
}

absl::Status BroadcastDdpState(int root, JobContext* ctx, ModelBuffers* buffers, DdpState* ddp,
                               JobCollectives* collectives) {
  // step, per-tensor skips, then params, then every optimizer state slot, as raw bytes.
  const size_t n = buffers->params.size();
  const size_t floats = n * (1 + ddp->slots().size());
  const size_t tensors = ctx->layout != nullptr ? ctx->layout->tensors().size() : 0;
  std::string wire(sizeof(int64_t) * (1 + tensors) + floats * sizeof(float), '\0');
  if (ctx->rank.load() == root) {
    char* at = wire.data();
    std::memcpy(at, &ctx->step, sizeof(int64_t));
    at += sizeof(int64_t);
    std::vector<int64_t> skips = ddp->skips();
    skips.resize(tensors, 0);
    std::memcpy(at, skips.data(), tensors * sizeof(int64_t));
    at += tensors * sizeof(int64_t);
    std::memcpy(at, buffers->params.data(), n * sizeof(float));
    at += n * sizeof(float);
    for (const auto& slot : ddp->slots()) {
      std::memcpy(at, slot.data(), n * sizeof(float));
      at += n * sizeof(float);
    }
  }
  TESSEL_RETURN_IF_ERROR(collectives->Broadcast(root, &wire));
  const char* at = wire.data();
  std::memcpy(&ctx->step, at, sizeof(int64_t));
  at += sizeof(int64_t);
  std::vector<int64_t> skips(tensors);
  std::memcpy(skips.data(), at, tensors * sizeof(int64_t));
  at += tensors * sizeof(int64_t);
  ddp->set_skips(std::move(skips));
  std::memcpy(buffers->params.data(), at, n * sizeof(float));
  at += n * sizeof(float);
  for (auto& slot : ddp->slots()) {
    std::memcpy(slot.data(), at, n * sizeof(float));
    at += n * sizeof(float);
  }
  if (ctx->half) FloatToHalf(*ctx->half, buffers->params.data(), buffers->params_half.data(), n);
  return collectives->ReleaseBytes(wire.size());
}

}  // namespace tessel::internal
