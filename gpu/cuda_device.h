// The CUDA device (device.h): device 0, three non-blocking streams, CUDA
// events, a stream-ordered memory pool and the kernels of gpu/kernels.h.
// Registered with OpenDevice("cuda") at static initialisation by the binary
// that links //gpu:cuda_device; opening it says why, as FailedPrecondition,
// when there is no usable driver or device (compute capability 8.0 or newer
// with memory pools).
//
// Beyond device.h, its CUDA side is public to other CUDA code that runs on
// its streams without being part of the worker's device interface (the demo
// model's layers, model/cuda_layers.cc): the native stream of each Stream,
// the pool, and the sticky error that such code records its failures into.
//
// Errors: every CUDA call's return code is checked. A failure of enqueued
// work (a launch, an asynchronous copy, an event operation, a kernel fault
// reported by a later call) is recorded once, the first one wins, and every
// later Synchronize* returns it:
//   InternalError("CUDA: <cudaGetErrorString> in <op>").
// Failures that are answered directly (Alloc, PinHost, ElapsedMs) are not
// recorded. After any failed call this thread's "last error" is cleared so
// that the next launch's cudaGetLastError() reports that launch alone.
//
// Threads: the device may be used from several threads (each stream fed by
// one thread at a time, as device.h requires). Streams and the pool are
// created when it opens and never change; the error and the pinned regions
// guard themselves. The thread's current CUDA device must be 0 (the default;
// nothing in Tessel changes it).
//
// Example (CUDA code on the device's compute stream):
//   CudaDevice* cuda = CudaDevice::From(device);   // null unless "cuda"
//   cuda->Launched(MyLaunch(cuda->stream(Stream::kCompute), ...), "MyKernel");
//   ...
//   absl::Status s = device->SynchronizeStream(Stream::kCompute);  // MyKernel's failure, if any
#ifndef TESSEL_GPU_CUDA_DEVICE_H_
#define TESSEL_GPU_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpu/device.h"
#include "gpu/internal/first_error.h"
#include "gpu/internal/pinned_regions.h"

namespace tessel::gpu {

class CudaDevice final : public Device {
 public:
  // Opens device 0 (what OpenDevice("cuda") calls).
  static absl::StatusOr<std::unique_ptr<Device>> Open();

  // `device` as the CUDA device, or null when it is another kind.
  static CudaDevice* From(Device* device);

  ~CudaDevice() override;

  // --- the CUDA side -------------------------------------------------------
  cudaStream_t stream(Stream s) const { return streams_[static_cast<int>(s)]; }
  // For small stream-ordered scratch (cudaMallocFromPoolAsync): keeps its
  // memory between uses, and never makes one stream wait for another to
  // reuse a block (it grows instead).
  cudaMemPool_t pool() const { return pool_; }
  // Records a failed CUDA call as the device's error; true if it succeeded.
  bool Check(cudaError_t e, absl::string_view op);
  // The same for a launcher's result (a cudaError_t as int, gpu/kernels.h).
  bool Launched(int e, absl::string_view op) { return Check(static_cast<cudaError_t>(e), op); }
  // Records a failure that is not a CUDA error code (a bad argument, a
  // cuBLAS status); the first one wins.
  void RecordError(const absl::Status& status) { first_error_.Record(status); }

  // --- device.h --------------------------------------------------------------
  absl::string_view kind() const override { return "cuda"; }
  std::string description() const override { return description_; }

  absl::StatusOr<void*> Alloc(size_t bytes) override;
  void Free(void* p) override;
  absl::Status PinHost(void* p, size_t bytes) override;
  void UnpinHost(void* p) override;

  std::unique_ptr<Event> NewEvent() override;
  void Record(Stream s, Event* e) override;
  void Wait(Stream s, const Event* e) override;
  absl::Status Synchronize(const Event* e) override;
  absl::Status SynchronizeStream(Stream s) override;
  absl::StatusOr<double> ElapsedMs(const Event* from, const Event* to) override;

  void CopyToHost(Stream s, void* host, const void* device, size_t bytes) override;
  void CopyToDevice(Stream s, void* device, const void* host, size_t bytes) override;
  void CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) override;
  void Fill(Stream s, float* dst, float value, size_t n) override;

  // cuda_device_compute.cc: the worker's kernels.
  void FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) override;
  void HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) override;
  void Pack(Stream s, const std::vector<Segment>& segments, float* dst) override;
  void Unpack(Stream s, const float* src, const std::vector<Segment>& segments) override;
  void ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                   const float* grad, float* const* state, size_t n) override;
  void TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                    uint8_t* wire) override;

 private:
  CudaDevice() = default;

  // Creates the streams and the pool; whatever was created is released by
  // the destructor when this fails.
  absl::Status CreateResources();

  // A device copy of a Pack/Unpack table from the pool on stream s (the
  // caller frees it on s after the kernel); null on failure, which is
  // recorded.
  void* UploadTable(Stream s, const void* table, size_t bytes, const char* op);

  std::string description_;
  std::array<cudaStream_t, kNumStreams> streams_{};
  cudaMemPool_t pool_ = nullptr;
  internal::FirstError first_error_;
  internal::PinnedRegions pinned_;
};

// The message of a CUDA error: "<string> (<name>)".
std::string CudaErrorText(cudaError_t e);

}  // namespace tessel::gpu

#endif  // TESSEL_GPU_CUDA_DEVICE_H_
