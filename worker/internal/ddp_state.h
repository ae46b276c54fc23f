// DdpState: what a DDP worker keeps that no server has: its optimizer state
// (its parameters are ModelBuffers::params), whether it holds the job's state
// at all (a replacement does not until a recovery hands it over), and the
// update it applies, identically on every rank, from the averaged gradient.
//
// Contract: Apply(step, ...) equals single-process ApplyUpdate on the mean
// gradient, bit for bit; under mixed precision the half gradient is widened
// in chunks (the optimizer is elementwise, so chunks change nothing) and the
// updated fp32 masters are rounded to the half copy. Digest covers (step,
// params, state): equal digests mean equal training states.
//
// Threads: the driving thread only.
//
// Example:
//   DdpState ddp(options.optimizer);
//   ddp.Init(layout.num_params(), /*holds=*/true);
//   ... the exchange averaged the gradient into buffers.grads ...
//   TESSEL_RETURN_IF_ERROR(ddp.Apply(step, ctx.half, layout, &buffers));
//   uint64_t digest = ddp.Digest(step + 1, buffers.params);  // equal on every rank
#ifndef TESSEL_WORKER_INTERNAL_DDP_STATE_H_
#define TESSEL_WORKER_INTERNAL_DDP_STATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/layout.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/tensor_steps.h"
#include "worker/ddp_updater.h"
#include "worker/internal/bucket_exchange.h"
#include "worker/internal/job_collectives.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class DdpState {
 public:
  explicit DdpState(const OptimizerParams& optimizer) : optimizer_(optimizer) {}

  // Fresh state for n parameters (InitState). `holds`: false for a
  // replacement that waits for the survivors' state.
  void Init(size_t n, bool holds);
  // Applies the averaged gradient of `step` (buffers.grads or grads_half) to
  // buffers.params (and rounds them to params_half), tensor by tensor at
  // each tensor's own step, leaving out the tensors set_skip_now named
  // (core/tensor_steps.h); then counts them and forgets the set. With an
  // updater, the updater applies the same runs instead (its error is
  // returned; the skips are counted either way).
  absl::Status Apply(int64_t step, std::optional<HalfType> half, const Layout& layout,
                     ModelBuffers* buffers);

  // The caller's own update (Worker::SetDdpUpdater), or nullptr. While one
  // is set, the parameters and slots here are copies: SyncToHost refreshes
  // them (before they are read) and SyncFromHost hands them back (after they
  // were written); both do nothing without an updater.
  DdpUpdater* updater() const { return updater_; }
  void set_updater(DdpUpdater* updater) { updater_ = updater; }
  // Replaces the updater: the host copies are refreshed from the old one
  // (SyncToHost), then handed to the new one (its Load). On error the old
  // one stays installed (a failed Load leaves the host copies current).
  absl::Status InstallUpdater(DdpUpdater* updater, std::optional<HalfType> half,
                              ModelBuffers* buffers);
  absl::Status SyncToHost(std::optional<HalfType> half, ModelBuffers* buffers);
  absl::Status SyncFromHost(const ModelBuffers& buffers);
  uint64_t Digest(int64_t step, absl::Span<const float> params) const;

  // The tensors the next Apply leaves alone (a mask over the layout's
  // tensors; empty = none).
  void set_skip_now(std::vector<uint8_t> mask) { skip_now_ = std::move(mask); }
  // Per tensor, the steps that skipped it (empty: none ever did).
  const std::vector<int64_t>& skips() const { return skips_; }
  void set_skips(std::vector<int64_t> skips) {
    skips_ = NoSkips(skips) ? std::vector<int64_t>() : std::move(skips);
    skip_now_.clear();
  }

  // New hyper-parameters (same kind) for the next Apply.
  void set_optimizer(const OptimizerParams& optimizer) { optimizer_ = optimizer; }
  bool holds_state() const { return holds_; }
  void set_holds_state(bool holds) { holds_ = holds; }
  std::vector<std::vector<float>>& slots() { return slots_; }
  const std::vector<std::vector<float>>& slots() const { return slots_; }
  int64_t bytes() const;

 private:
  OptimizerParams optimizer_;
  DdpUpdater* updater_ = nullptr;
  bool holds_ = true;
  std::vector<std::vector<float>> slots_;
  std::vector<int64_t> skips_;
  std::vector<uint8_t> skip_now_;
  std::vector<DdpUpdater::Run> runs_;  // Apply's (reused: no allocation per step)
};

// DDP: every rank takes rank `root`'s step, params and optimizer state, bit
// for bit (a broadcast through `collectives`).
absl::Status BroadcastDdpState(int root, JobContext* ctx, ModelBuffers* buffers, DdpState* ddp,
                               JobCollectives* collectives);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_DDP_STATE_H_
