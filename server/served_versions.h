// ServedVersions: where a shard keeps the values it serves, by version, so
// that a PULL of the version before the step in flight is answered with
// that version's bits (issue 44: a worker that replaces a dead rank in the
// middle of step t pulls version t-1 and recomputes its gradient, bitwise,
// though the dead rank's pushes of step t already updated some buckets).
//
// The rule, kept here and nowhere else (Kept):
//   - A shard that holds the parameters (ZeRO-1/2, FSDP) of a job whose
//     workers may rejoin in place (JobSpec.in_place_update false) keeps two served
//     versions: version v lives in buffer BufferFor(v) = v % 2. The update
//     of step v+1 reads update_in(v) and writes update_out(v) (the
//     out-of-place kernels, core/optimizer.h), so version v stays whole
//     while step v+1 runs and after it, until step v+2 writes it over.
//       fp32: the masters are what is served: two fp32 buffers.
//       mixed precision: the fp32 masters are not served and stay one
//       buffer updated in place; the served half copy has two buffers,
//       RefreshHalf(v+1, ...) writing version v+1's.
//   - DDP keeps one buffer for every version: it serves the mean of the
//     step, and nothing before it is asked for.
//   - A ZeRO job with JobSpec.in_place_update keeps one buffer too and
//     updates in place (a replacement worker cannot rejoin in place, so
//     nothing asks for version v once step v+1 updated a bucket): 4 bytes
//     of memory and of the update's traffic less per parameter in fp32
//     (the steady step 0.81x at 64 MiB with two versions, W=2 SGD:
//     docs/performance.md).
//   - At a step boundary "the parameters" are version v's buffer: INIT
//     (v = 0), a restore or WriteState's commit (v = the step it moves to),
//     snapshots, the digest, ReadState.
//
// Why a send of version v can never be overwritten while in flight: version
// v's buffer is next written by the update of step v+2 (step v+1 writes the
// other one). A bucket's update of step v+2 starts only once every rank
// pushed that bucket of step v+2, and a rank pushes a gradient of step v+2
// only after it received all of version v+1, hence after it received all of
// version v it computed step v+1's gradient from: every PARAMS frame of
// version v was delivered before any update can write its buffer. This
// holds however the update runs: on the UpdatePool's threads (chunks of
// the bucket's own range, still after that bucket's last push), after
// prefix folds (they sum pushes into an accumulator, never the values),
// with borrowed pushes (gradients in the workers' memory, not values), and
// for a held step (its buckets are reduced into the job's held sums and
// applied from them at RELEASE, which again needs every rank's push of
// that step). A replacement worker (issue 44) pulls version t-1 during step
// t and must push step t before step t+1, which writes t-1's buffer, can
// begin.
//
// Memory: BytesPerElement is the one rule JobStats.params_bytes and job
// admission (server/job_admission.h) count by.
//
// Threads: the buffers' contents follow the step protocol (ShardJob's
// lock orders who may write which version's buffer); the object itself is
// immutable after construction.
//
// Example:
//   ServedVersions v(ServedVersions::Kept(/*holds_params=*/true, spec.in_place_update()),
//                    std::nullopt, n, memory);
//   rule->Apply(step, part, srcs, count, v.update_in(version), v.update_out(version));
//   v.RefreshHalf(version + 1, offset, len);          // mixed precision only
//   transport->Send(to, header, v.served(version, offset), bytes, done);
#ifndef TESSEL_SERVER_SERVED_VERSIONS_H_
#define TESSEL_SERVER_SERVED_VERSIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "core/precision.h"
#include "transport/payload_vector.h"

namespace tessel {

class ServedVersions {
 public:
  ServedVersions() = default;
  // `kept` (Kept()) versions of `n` elements of the shard's range,
  // allocated from `memory` (may be null: the heap) so workers on this host
  // read them in place.
  ServedVersions(int kept, std::optional<HalfType> half, size_t n,
                 std::shared_ptr<PayloadMemory> memory);

  // Served versions a shard keeps: 2 where it holds the parameters and the
  // job's workers may rejoin in place, else 1.
  static int Kept(bool holds_params, bool in_place_update) {
    return holds_params && !in_place_update ? 2 : 1;
  }
  // Bytes per element of a shard's range its served values take: two
  // versions fp32 2 x 4, mixed precision 4 (masters) + 2 x 2 (half
  // copies); one version 4 (+ 2 for a half copy).
  static int64_t BytesPerElement(int kept, bool half);
  // A count of versions, not whether the shard holds parameters (Kept()).
  ServedVersions(bool, std::optional<HalfType>, size_t, std::shared_ptr<PayloadMemory>) = delete;
  static int64_t BytesPerElement(bool, bool) = delete;
  // Which of `kept` buffers version `version` (>= 0) lives in.
  static int BufferFor(int64_t version, int kept) {
    return kept == 1 ? 0 : static_cast<int>(version % kept);
  }

  size_t size() const { return n_; }
  // Served versions kept (Kept()).
  int kept() const { return kept_; }
  // Every buffer's bytes (BytesPerElement x size()).
  int64_t bytes() const;

  // The fp32 values of `version`: fp32 ZeRO the served masters of that
  // version; mixed precision the one master buffer; DDP the mean.
  float* values(int64_t version) { return fp32_[Fp32Buffer(version)].data(); }
  const float* values(int64_t version) const { return fp32_[Fp32Buffer(version)].data(); }
  // The update of step `version` + 1: reads update_in(version), writes
  // update_out(version) (the same buffer where one is kept).
  const float* update_in(int64_t version) const { return values(version); }
  float* update_out(int64_t version) { return values(version + 1); }
  // The wire bytes of `version` at element `offset`: the half copy under
  // mixed precision, else the fp32 values.
  const void* served(int64_t version, int64_t offset) const;
  // Mixed precision: writes version `version`'s half copy of [offset,
  // offset + n) from the masters. Nothing otherwise.
  void RefreshHalf(int64_t version, size_t offset, size_t n);

 private:
  int Fp32Buffer(int64_t version) const { return BufferFor(version, fp32_kept_); }

  int kept_ = 1;
  std::optional<HalfType> half_;
  size_t n_ = 0;
  int fp32_kept_ = 1;
  PayloadVector<float> fp32_[2];
  PayloadVector<uint16_t> half_copy_[2];
};

}  // namespace tessel

#endif  // TESSEL_SERVER_SERVED_VERSIONS_H_
