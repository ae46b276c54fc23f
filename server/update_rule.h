// UpdateRule: what a shard does with a bucket's rank-order reduction, by
// strategy, chosen once when the job is created (MakeUpdateRule):
//   ZeroUpdate (ZeRO-1/2, FSDP): the shard holds the fp32 master parameters
//     of its range and the optimizer's state; a bucket's update averages the
//     ranks' gradients and applies the optimizer, tensor by tensor, at each
//     tensor's own step, leaving the tensors no rank had a gradient for
//     (skip_now) alone (core/tensor_steps.h).
//   DdpMean (DDP): the shard holds only the mean gradient of its range,
//     which the workers pull and apply themselves; no optimizer, no state.
// holds_params() is the strategy's answer to everything else the job
// decides by kind: INIT, checkpoints, ReadState/WriteState, SetOptimizer and
// SkipTensors need the parameters here (ZeroUpdate), and DDP refuses them.
//
// Contract: Apply(step, part, srcs, count, in, out) reads the sources of
// the rank-order sum over `part` (shard offsets; BucketReducer::SumChunks)
// and the parameters in[part], and writes out[part] (and the state over
// `part`): out of place, so the shard keeps the version before
// (server/served_versions.h); in == out updates in place, the same bits.
// Out of place, the tensors the step skips are copied from in to out. DDP
// reads no parameters: it writes the mean to out[part]. The divisor is
// always the world size, so a prefix accumulator among the sources changes
// no bit. Applying a bucket in chunks gives the bits of one Apply over it.
//
// Threads: Apply runs on compute threads, several at once on different
// parts; nothing else may touch those parts meanwhile (the step protocol
// guarantees it). On a thread with an UpdatePool (server/update_pool.h:
// the data plane's compute threads), a part of at least 2 x
// UpdatePool::kMinChunk elements is split into chunks run on the pool's
// threads too, and Apply returns once all are done (the same bits: every
// kernel is element-wise). state() is the owner's to read between steps.
//
// Example:
//   std::unique_ptr<UpdateRule> rule = MakeUpdateRule(ddp, layout, range, world, optimizer);
//   reducer.SumChunks(b, [&](Range part, const float* const* srcs, int count) {
//     rule->Apply(bucket_step, part, srcs, count, in, out);
//   });
#ifndef TESSEL_SERVER_UPDATE_RULE_H_
#define TESSEL_SERVER_UPDATE_RULE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layout.h"
#include "core/optimizer.h"

namespace tessel {

// What one bucket's update reads from its job, copied when it starts.
struct BucketStep {
  int64_t step = 0;  // the job step being applied (version + 1)
  OptimizerParams optimizer;
  std::vector<int64_t> skips;     // per tensor, steps that skipped it (empty: none)
  std::vector<uint8_t> skip_now;  // tensors this step skips (empty: none)
};

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  virtual bool holds_params() const = 0;
  // The optimizer's state over the shard, StateSlots slots (DDP: none).
  virtual std::vector<std::vector<float>>& state() = 0;
  virtual void Apply(const BucketStep& s, Range part, const float* const* srcs, int count,
                     const float* in, float* out) = 0;
};

// `layout` must outlive the rule; `range` is the shard's.
std::unique_ptr<UpdateRule> MakeUpdateRule(bool ddp, const Layout& layout, Range range, int world,
                                           const OptimizerParams& optimizer);

class ZeroUpdate final : public UpdateRule {
 public:
  // Allocates the optimizer's state over the range and initializes it
  // (InitState); a restore overwrites it.
  ZeroUpdate(const Layout& layout, Range range, int world, const OptimizerParams& optimizer);
  bool holds_params() const override { return true; }
  std::vector<std::vector<float>>& state() override { return state_; }
  void Apply(const BucketStep& s, Range part, const float* const* srcs, int count, const float* in,
             float* out) override;

 private:
  // Apply over `part` on the calling thread.
  void ApplyOnThisThread(const BucketStep& s, Range part, const float* const* srcs, int count,
                         const float* in, float* out);

  const Layout& layout_;
  const Range range_;
  const int world_;
  std::vector<std::vector<float>> state_;
};

class DdpMean final : public UpdateRule {
 public:
  explicit DdpMean(int world) : world_(world) {}
  bool holds_params() const override { return false; }
  std::vector<std::vector<float>>& state() override { return state_; }
  void Apply(const BucketStep& s, Range part, const float* const* srcs, int count, const float* in,
             float* out) override;

 private:
  const int world_;
  std::vector<std::vector<float>> state_;  // always empty
};

}  // namespace tessel

#endif  // TESSEL_SERVER_UPDATE_RULE_H_
