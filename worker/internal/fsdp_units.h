// FsdpUnits: the per-unit buffers of fsdp (ZeRO-3) and per-unit zero2. A
// unit is a group of consecutive tensors (WorkerOptions::fsdp_units). For
// fsdp the worker holds a unit's parameters only between Gather and Release
// (gathered from every shard on demand, optionally prefetched); for both,
// a unit's gradients live in their own buffer from UnitGrads until PushUnit
// has sent them, then are freed.
//
// Contract:
//   - Prefetch(u) starts the pull of the unit's buckets for the current
//     step; Gather(u) waits for them; Release(u) frees them.
//   - PushUnit(u) sends each of the unit's buckets from the unit's gradient
//     buffer, which lives until its last send completed.
//   - Barrier(v) (fsdp) returns once every shard reports step v applied.
//   - memory(): bytes held now and at peak, for the memory contract.
//
// Threads: the driving thread calls everything; OnParams runs on the
// transport's progress thread. Unit buffers and counters are under the
// channel's mu().
#ifndef TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_
#define TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

class FsdpUnits : public FrameSink {
 public:
  FsdpUnits(JobContext* ctx, DataChannel* channel);

  // Builds the units from ctx->options.fsdp_units over the layout.
  absl::Status Init();
  int size() const { return static_cast<int>(units_.size()); }
  Range range(int unit) const { return units_[unit].range; }

  absl::Status Prefetch(int unit);
  absl::StatusOr<absl::Span<const float>> Gather(int unit);
  absl::StatusOr<absl::Span<const uint16_t>> GatherHalf(int unit);
  void Release(int unit);
  // fsdp: every unit gathered in turn (widened from half under mixed
  // precision) into `all` (the model's size), each released after.
  absl::Status GatherAll(absl::Span<float> all);
  absl::Span<float> Grads(int unit);
  absl::Span<uint16_t> HalfGrads(int unit);
  // Pushes the unit's gradients; `pushed(shard, bucket)` is told of each.
  // With `part` (fp32 only): a micro-batch part, summed by the servers into
  // the unit's push of this step (nobody is told); a part or push after
  // parts first waits until the earlier ones are sent, so the servers get
  // one frame of a bucket from this rank at a time.
  absl::Status Push(int unit, const std::function<void(int shard, int bucket)>& pushed,
                    bool part = false);
  // fsdp: waits until every shard holds parameters of `version`.
  absl::Status Barrier(int64_t version);

  // A recovery starts: drop gradients and forget every unit's version.
  void Reset();
  // Under the channel's mu(): frees held parameters; if a transfer may still
  // write into them (stuck), they are retired (kept, never read) instead.
  void RetireLocked(bool stuck, std::vector<std::vector<float>>* retired,
                    std::vector<std::vector<uint16_t>>* retired_half);
  // Adds the parameter and gradient bytes held now to *params and *grads;
  // sets *peak_grads to the most gradient bytes held at once; returns the
  // most parameter and gradient bytes held at once.
  int64_t AddHeldBytes(int64_t* params, int64_t* grads, int64_t* peak_grads);

  Accept OnParams(const FrameHeader& h) override;

 private:
  struct Unit {
    Range range;
    std::vector<std::pair<int, int>> buckets;   // per shard: first bucket, count
    std::vector<float> params;                  // held parameters; empty when released
    std::shared_ptr<std::vector<float>> grads;  // until pushed
    // Mixed precision: the same, in half (the fp32 ones stay empty).
    std::vector<uint16_t> params_half;
    std::shared_ptr<std::vector<uint16_t>> grads_half;
    int parts = 0;         // micro-batch parts sent this step
    int64_t version = -1;  // version held or in flight
    int64_t expected = 0;
    int64_t received = 0;
  };
  static int64_t Bytes(const Unit& u);
  void AccountLocked();
  absl::Status WaitForUnit(int unit);

  JobContext* const ctx_;
  DataChannel* const channel_;
  std::vector<Unit> units_;           // buffers and counters under channel_->mu()
  std::vector<int64_t> unit_starts_;  // range.begin of each unit
  // Under channel_->mu().
  int64_t sync_version_ = -1;  // step a barrier waits for
  int64_t sync_expected_ = 0;
  int64_t sync_received_ = 0;
  int64_t held_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t peak_grads_bytes_ = 0;  // the gradient buffers' part, at its own peak
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_
