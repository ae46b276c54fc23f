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
#ifndef TESSEL_WORKER_INTERNAL_DDP_STATE_H_
#define TESSEL_WORKER_INTERNAL_DDP_STATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "core/optimizer.h"
#include "core/precision.h"
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
  // buffers.params (and rounds them to params_half).
  void Apply(int64_t step, std::optional<HalfType> half, ModelBuffers* buffers);
  uint64_t Digest(int64_t step, const std::vector<float>& params) const;

  // New hyper-parameters (same kind) for the next Apply.
  void set_optimizer(const OptimizerParams& optimizer) { optimizer_ = optimizer; }
  bool holds_state() const { return holds_; }
  void set_holds_state(bool holds) { holds_ = holds; }
  std::vector<std::vector<float>>& slots() { return slots_; }
  const std::vector<std::vector<float>>& slots() const { return slots_; }
  int64_t bytes() const;

 private:
  OptimizerParams optimizer_;
  bool holds_ = true;
  std::vector<std::vector<float>> slots_;
};

// DDP: every rank takes rank `root`'s step, params and optimizer state, bit
// for bit (a broadcast through `collectives`).
absl::Status BroadcastDdpState(int root, JobContext* ctx, ModelBuffers* buffers, DdpState* ddp,
                               JobCollectives* collectives);

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_DDP_STATE_H_
