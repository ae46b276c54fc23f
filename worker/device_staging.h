// DeviceStaging: a worker whose model computes on a device (gpu/device.h).
// The Worker keeps its host buffers (params(), grads(), or their half
// copies under mixed precision) for the data path; this class keeps the
// device copies and moves between the two on the device's copy streams,
// ordered by events, so the copies overlap computation:
//
//   gradients  as backward enqueues each range's gradient on kCompute,
//              GradientsEnqueued(range) queues its copy (cast to half first
//              under mixed precision) on kToHost behind an event; Step() hands
//              each range to Worker::GradientsReady as soon as its copy lands,
//              so the push of the last layer's gradients runs while the
//              device still computes the first layers';
//   parameters after Worker::Step() the new parameters go back on kToDevice
//              chunk by chunk (e.g. one chunk per layer, in forward order,
//              widened from half on the device), each behind an event that
//              WaitParams(chunk) puts in front of that chunk's first reader:
//              the next forward starts once its first layer is back.
//
// The worker's host buffers are pinned (page-locked) so the copies are
// asynchronous; they are re-pinned after a recovery, which may move them
// (Reload). Only the full-buffer strategies use this path (ddp, zero1, zero2
// without units): per-unit strategies hand the model host pointers that are
// valid only until Release/PushUnit (worker/unit_step.h), so their device
// model copies and waits inside each call (tools/train_main.cc).
//
// Top-k compression (WorkerOptions::topk_ratio > 0) runs on the device:
// once the ranges enqueued so far complete a bucket, its compression
// (gpu::Device::TopkCompress, core/topk.h's bits) is queued on kToHost
// against a device residual, and only the bucket's pairs (8 bytes each) are
// copied, into Worker::SparseBucket, and handed over with
// Worker::SparseGradientsReady. The device residual is cleared by Reload(), as
// the worker clears its own on recovery.
//
// DDP's update runs on the device too: the staging installs itself as the
// worker's DdpUpdater (worker/ddp_updater.h), so after each step the averaged
// gradient comes to the device chunk by chunk (widened there under mixed
// precision) and gpu::Device::ApplyUpdate updates the device's parameters
// (fp32 masters under mixed precision, rounded to half and widened for the
// model) with optimizer state kept in device memory; each chunk's event then
// releases the next forward. The worker's host copies are refreshed (Store)
// only when it reads them: Serialize, GatherAll, a state broadcast.
//
// Why there are two stagings: python/tessel/torch/staging.py (Staging) does
// the same job for tessel.torch, and neither can be the other, because each
// stages memory its own runtime owns, ordered on its own runtime's streams.
// This class owns raw device buffers allocated through gpu::Device and
// orders copies on that Device's kCompute/kToHost/kToDevice streams, for
// models that compute through gpu::Device (model/device_mlp.h,
// tools/train_main.cc); it also does what only this path has (DDP's update
// and top-k compression on the device, half casts on the device, per-chunk
// parameter waits). The Python one stages torch tensors: torch's caching
// allocator owns them (the model's parameters and .grad are views of them),
// backward runs on torch's current stream, and it orders its copies with
// torch.cuda streams and events; the Python extension links neither CUDA nor
// gpu/ (torch brings its own CUDA runtime), so it cannot hand torch's memory
// and stream to this class. The two keep one protocol on purpose: gradients
// leave range by range behind the stream that produced them, go to
// Worker::GradientsReady in order as each copy lands, and the new parameters
// go back after Worker::Step() before their first reader.
//
// Where the UCX in use can move CUDA memory (Worker::device_memory_types()
// names "cuda": a cuda_copy or cuda_ipc transport) device buffers could go
// to UCX directly; Debian's UCX has neither, and this class always stages
// through host memory (docs/gpu.md).
//
// Example:
//   auto staging = DeviceStaging::Create(worker, device, layer_chunks);
//   for (step...) {
//     mlp->SetBatch(...);
//     for (l...) { staging->WaitParams(Stream::kCompute, l); mlp->Forward(l, ...); }
//     for (l = L - 1...0) { mlp->Backward(l, ...); staging->GradientsEnqueued(range(l)); }
//     absl::Status s = staging->Step();
//     if (Worker::IsRecoverable(s)) { worker->Recover(); staging->Reload(); }
//   }
//
// Thread safety: the driving thread only (the Worker's).
#ifndef TESSEL_WORKER_DEVICE_STAGING_H_
#define TESSEL_WORKER_DEVICE_STAGING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layout.h"
#include "gpu/device.h"
#include "worker/ddp_updater.h"
#include "worker/worker.h"

namespace tessel {

class DeviceStaging : private DdpUpdater {
 public:
  // One copy of the last Step(), in milliseconds from the step's first
  // gradient event: where it ran on kToHost, and when the compute stream had
  // finished everything enqueued before Step() (the overlap test and the
  // benchmark read these).
  struct CopyTiming {
    Range range;         // the gradient elements it carries (top-k: a bucket's)
    uint64_t bytes = 0;  // what crossed to the host
    double begin_ms = 0;
    double end_ms = 0;
  };
  struct StepTiming {
    std::vector<CopyTiming> copies;
    double compute_done_ms = 0;
  };

  // After worker->RegisterLayout (and after any Recover): allocates the
  // device parameters and gradients, pins the worker's host buffers and
  // uploads the parameters (waits for that); for DDP also the optimizer
  // state, and installs itself as the worker's DdpUpdater until destroyed
  // (which stores the parameters and state back into the worker). `chunks`: ranges of the flat
  // vector in the order the model first reads them, together covering it
  // (e.g. the layers); empty = one chunk. FailedPrecondition for a per-unit
  // strategy; InvalidArgument for chunks that do not tile the vector.
  static absl::StatusOr<std::unique_ptr<DeviceStaging>> Create(Worker* worker, gpu::Device* device,
                                                               std::vector<Range> chunks);
  ~DeviceStaging();

  // The device's parameters and gradients (fp32, the worker's layout).
  float* params() const { return params_.data(); }
  float* grads() const { return grads_.data(); }

  // Makes `stream` wait until chunk `chunk`'s parameters of the current step
  // are on the device.
  void WaitParams(gpu::Stream stream, int chunk);
  // The gradient of [begin, end) is enqueued on kCompute (nothing enqueued
  // later writes it): queue its copy to the worker (top-k: the compression
  // and copy of every bucket it completes). Ranges may come in any order,
  // each once per step, together covering the parameters; a range out of
  // bounds or handed twice fails the next Step() with InvalidArgument.
  void GradientsEnqueued(Range range);
  // Hands every queued range to the worker as its copy lands, runs
  // Worker::Step() and queues the new parameters' upload. On error the
  // step's status (Worker::IsRecoverable tells a recovery from a failure);
  // the device is idle on return.
  absl::Status Step();
  // After Worker::Recover() (or Deserialize): the worker's buffers may have
  // moved and hold the restored parameters: re-pin, upload, wait. (DDP: the
  // worker already handed any new parameters and state over through Load.)
  absl::Status Reload();

  // Copy and compute times of the last successful Step() (the device's
  // clock).
  absl::StatusOr<StepTiming> LastStepTiming();

 private:
  struct PendingCopy {
    Range range;
    int shard = -1;  // top-k: the bucket whose pairs it copies
    int bucket = -1;
    uint64_t bytes = 0;
    std::unique_ptr<gpu::Event> computed;  // on kCompute: the gradient is final
    std::unique_ptr<gpu::Event> begun;     // on kToHost: the copy starts
    std::unique_ptr<gpu::Event> landed;    // on kToHost: it is in host memory
  };

  DeviceStaging(Worker* worker, gpu::Device* device, std::vector<Range> chunks);
  // DdpUpdater (DDP only).
  absl::Status Apply(const OptimizerParams& optimizer, absl::Span<const Run> runs) override;
  absl::Status Store(float* params, absl::Span<float* const> slots) override;
  absl::Status Load(const float* params, absl::Span<const float* const> slots) override;
  // The parameters DDP's optimizer updates: the fp32 masters under mixed
  // precision, else the model's own.
  float* masters() const { return half_ ? masters_.data() : params_.data(); }
  // Under mixed precision: the model's parameters of `r` from the masters
  // (rounded to half, widened), on kToDevice.
  void RoundMasters(Range r);
  // Puts kToDevice behind everything enqueued on kCompute so far.
  void AfterCompute();
  // The worker's values of `r` (`host`, or `host_half` under mixed
  // precision, widened on the device through `half_scratch`) into the
  // device floats `dst`, on kToDevice.
  void ToDevice(Range r, const float* host, const uint16_t* host_half, uint16_t* half_scratch,
                float* dst);
  absl::Status Pin();
  void Unpin();
  // Queues the upload of every chunk behind the compute stream's current
  // work.
  void Upload();
  // Waits for every queued copy (after a failure: so nothing still writes
  // host memory the worker may reuse).
  absl::Status Drain();
  // A PendingCopy with its events (reused from spare_), computed recorded.
  PendingCopy NewCopy();
  // Top-k: counts `range` into its buckets and queues each completed one.
  void EnqueueSparse(Range range);

  Worker* worker_;
  gpu::Device* device_;
  std::vector<Range> chunks_;
  std::optional<HalfType> half_;
  gpu::DeviceBuffer<float> params_, grads_;
  gpu::DeviceBuffer<uint16_t> half_params_, half_grads_;
  // Top-k: the residual, every bucket's pairs (laid out as
  // Worker::sparse_grads()), and per (shard, bucket) the elements enqueued
  // this step.
  // DDP: the update on the device (installed as the worker's DdpUpdater).
  bool ddp_on_device_ = false;
  gpu::DeviceBuffer<float> masters_;             // mixed precision only
  std::vector<gpu::DeviceBuffer<float>> slots_;  // the optimizer state
  double topk_ratio_ = 0;
  gpu::DeviceBuffer<float> residual_;
  gpu::DeviceBuffer<uint8_t> sparse_;
  std::vector<std::vector<int64_t>> bucket_ready_;
  absl::Status enqueue_error_;
  std::vector<std::unique_ptr<gpu::Event>> chunk_ready_;
  std::unique_ptr<gpu::Event> compute_done_;
  std::vector<PendingCopy> pending_;
  // Events of finished PendingCopies, reused (no allocation per step).
  std::vector<PendingCopy> spare_;
  std::vector<PendingCopy> last_;  // the last Step()'s, for LastStepTiming
  std::vector<void*> pinned_;
  bool warned_unpinned_ = false;
};

}  // namespace tessel

#endif  // TESSEL_WORKER_DEVICE_STAGING_H_
