// FsdpUnits: the per-unit buffers of fsdp (ZeRO-3) and per-unit zero2. A
// unit is a group of consecutive tensors (WorkerOptions::fsdp_units). For
// fsdp the worker holds a unit's parameters only between Gather and Release
// (gathered from every shard on demand, optionally prefetched); for both,
// a unit's gradients live in their own buffer from UnitGrads until PushUnit
// has sent them, then are freed.
//
// A unit's parameters are in one of three states (UnitState, as the Python
// FsdpUnit's UnitState says what a unit holds):
//
//   kReleased   nothing held
//   kGathering  a buffer of the unit's size; the pulls of `version` are sent
//               and its buckets are landing
//   kGathered   every bucket of `version` landed: Gather returns them
//
//   Prefetch(u):          kReleased -> kGathering (a unit without buckets
//                         goes on to kGathered at once); held for `version`
//                         already: no-op; held for another step: released
//                         first
//   the last bucket lands kGathering -> kGathered
//   Release(u):           kGathering (once landed: -> kGathered first),
//                         kGathered -> kReleased; kReleased: no-op
//   Reset() (recovery):   any -> kReleased
//
// Any other transition is a bug in this file: CheckUnitTransition says so,
// and the unit aborts the process (a programmer's invariant, not input).
// The gradient buffer has a lifecycle of its own: made by Grads/HalfGrads,
// handed to the sends (and freed by them) by Push.
//
// Contract:
//   - Prefetch(u) starts the pull of the unit's buckets for the current
//     step; Gather(u) waits for them; Release(u) frees them.
//   - A PARAMS frame lands only in a kGathering unit of its step and epoch,
//     sized as its bucket; any other is dropped and counted stale.
//   - PushUnit(u) sends each of the unit's buckets from the unit's gradient
//     buffer, which lives until its last send completed.
//   - Barrier(v) (fsdp) returns once every shard reports step v applied.
//   - A buffer a transfer may still write into (a release whose wait
//     failed, a recovery's Reset) is parked, never freed, until Retire.
//   - memory(): bytes held now and at peak, for the memory contract.
//
// Threads: the driving thread calls everything; OnParams and the receives
// it starts complete on the transport's progress thread. Unit states,
// counters and buffers are under the units' own mutex (mu_, below), never
// the channel's; the channel only delivers frames and is woken (Notify).
//
// Example:
//   FsdpUnits units(&ctx, &channel);
//   channel.SetSink(&units);
//   TESSEL_RETURN_IF_ERROR(units.Init());  // after the layout is registered
//   TESSEL_RETURN_IF_ERROR(units.Prefetch(1));  // overlaps unit 0's forward
//   TESSEL_ASSIGN_OR_RETURN(absl::Span<const float> p, units.Gather(0));
//   ... forward and backward of unit 0 over p, gradients into units.Grads(0) ...
//   units.Release(0);
//   TESSEL_RETURN_IF_ERROR(units.Push(0, [](int shard, int bucket) {}));
#ifndef TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_
#define TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "worker/internal/data_channel.h"
#include "worker/internal/job_context.h"

namespace tessel::internal {

enum class UnitState { kReleased, kGathering, kGathered };

// "released", "gathering", "gathered".
const char* UnitStateName(UnitState state);
// OK if `from` -> `to` is a transition of the table above; Internal naming
// both otherwise.
absl::Status CheckUnitTransition(UnitState from, UnitState to);

class FsdpUnits : public FrameSink {
 public:
  FsdpUnits(JobContext* ctx, DataChannel* channel);

  // Builds the units from ctx->options.fsdp_units over the layout.
  absl::Status Init();
  int size() const { return static_cast<int>(units_.size()); }
  Range range(int unit) const { return units_[unit].range; }
  // The unit's parameter state (kReleased for no such unit).
  UnitState state(int unit) const;

  absl::Status Prefetch(int unit);
  // The unit's parameters, valid until its Release (driving thread).
  absl::StatusOr<absl::Span<const float>> Gather(int unit);
  absl::StatusOr<absl::Span<const uint16_t>> GatherHalf(int unit);
  void Release(int unit);
  // fsdp: every unit gathered in turn (widened from half under mixed
  // precision) into `all` (the model's size), each released after.
  absl::Status GatherAll(absl::Span<float> all);
  absl::Span<float> Grads(int unit);
  absl::Span<uint16_t> HalfGrads(int unit);
  // Pushes the unit's gradients; `pushed(shard, bucket)` is told of each.
  // With `part`: a micro-batch part, summed by the servers into the unit's
  // push of this step in the job's precision (nobody is told); a part or push
  // after
  // parts first waits until the earlier ones are sent, so the servers get
  // one frame of a bucket from this rank at a time.
  absl::Status Push(int unit, const std::function<void(int shard, int bucket)>& pushed,
                    bool part = false);
  // fsdp: waits until every shard holds parameters of `version`.
  absl::Status Barrier(int64_t version);
  // A replacement rejoining in place (rejoin.h): while the job is at
  // `version`, Push leaves out the buckets `on_shards` marks (per shard, per
  // bucket): the shards hold this rank's push of them from its dead
  // predecessor. Each is still told to `pushed`.
  void SkipPushed(int64_t version, std::vector<std::vector<uint8_t>> on_shards);

  // A recovery starts: drop gradients, release every unit (what a transfer
  // may still write into is parked until Retire).
  void Reset();
  // After a recovery's SettleReceives: parked buffers are retired (kept,
  // never read) if a transfer may still write into them (stuck), else freed.
  void Retire(bool stuck, std::vector<std::vector<float>>* retired,
              std::vector<std::vector<uint16_t>>* retired_half);
  // Adds the parameter and gradient bytes held now to *params and *grads;
  // sets *peak_grads to the most gradient bytes held at once; returns the
  // most parameter and gradient bytes held at once.
  int64_t AddHeldBytes(int64_t* params, int64_t* grads, int64_t* peak_grads);

  Accept OnParams(const FrameHeader& h) override;

 private:
  struct Unit {
    Range range;                               // set by Init
    std::vector<std::pair<int, int>> buckets;  // per shard: first bucket, count (Init)
    UnitState state = UnitState::kReleased;
    std::vector<float> params;                  // held parameters; empty when released
    std::shared_ptr<std::vector<float>> grads;  // until pushed
    // Mixed precision: the same, in half (the fp32 ones stay empty).
    std::vector<uint16_t> params_half;
    std::shared_ptr<std::vector<uint16_t>> grads_half;
    int parts = 0;         // micro-batch parts sent this step
    int64_t version = -1;  // step held or in flight (kGathering, kGathered)
    int64_t epoch = -1;    // the epoch it was pulled in
    int64_t expected = 0;
    int64_t received = 0;
  };
  absl::Status CheckUnit(int unit) const;
  // Moves the unit to `to`; aborts on a transition the table does not have.
  void MoveLocked(int unit, UnitState to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the unit's parameters, or parks them when a transfer may still
  // write into them (`landing`); the unit is kReleased after.
  void ReleaseLocked(int unit, bool landing) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static int64_t ParamBytes(const Unit& u);
  static int64_t GradBytes(const Unit& u);
  void AccountLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitForUnit(int unit);
  // A bucket of the unit pulled at (epoch, version) landed (progress thread).
  void Landed(int unit, int64_t epoch, int64_t version);

  JobContext* const ctx_;
  DataChannel* const channel_;

  // Locking rule: units_' states, counters and buffer vectors are under
  // mu_, as are the barrier's counters and the byte accounting. Init writes
  // the units' ranges and buckets before any frame can come (read freely
  // after). The driving thread is the only one to size or free a buffer, so
  // it reads a unit's buffers without mu_ (Gather's span, Push's sends);
  // the progress thread takes mu_ to look a buffer up. mu_ is taken before
  // the channel's, never while it is held.
  mutable absl::Mutex mu_;
  std::vector<Unit> units_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> unit_starts_;  // range.begin of each unit (Init)
  // SkipPushed's buckets and the version they are for (driving thread).
  int64_t skip_version_ = -1;
  std::vector<std::vector<uint8_t>> skip_;
  // Parameter buffers a transfer may still write into, until Retire.
  std::vector<std::vector<float>> parked_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<uint16_t>> parked_half_ ABSL_GUARDED_BY(mu_);
  int64_t sync_version_ ABSL_GUARDED_BY(mu_) = -1;  // step a barrier waits for
  int64_t sync_expected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_received_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The gradient buffers' part, at its own peak.
  int64_t peak_grads_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessel::internal

#endif  // TESSEL_WORKER_INTERNAL_FSDP_UNITS_H_
