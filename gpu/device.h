// A compute device for workers: memory, in-order streams, events, copies and
// the kernels a worker runs on its buffers (the wire casts, bucket
// pack/unpack, the five optimizers, top-k compression). A model's own compute
// is not here: it runs on the same streams through the model's code (the demo
// MLP's layers: model/device_layers.h).
//
// Two implementations stand behind one interface, and one test suite
// (gpu/device_test.cc) runs over both:
//   - "cuda" (gpu/cuda_device.h, gpu/kernels.h): a CUDA device, pinned host
//     memory through cudaHostRegister. Only binaries that ask for a CUDA
//     device link it (//gpu:cuda_device, the static CUDA runtime);
//     OpenDevice("cuda") on a machine without a usable device or driver
//     returns FailedPrecondition with the reason, and callers keep to the CPU
//     path.
//   - "host" (gpu/host_device.h): the same semantics on the CPU. Each stream
//     is a thread that runs its queue in order; "device memory" is host
//     memory; the kernels are the CPU reference kernels (core/optimizer.h,
//     core/precision.h, core/topk.h), so a model run on it gives the CPU
//     path's results bit for bit. It exists so that the staging logic above it
//     (worker/device_staging.h) is exercised, with real concurrency, where no
//     GPU is.
//
// Semantics (CUDA's):
//   - Work enqueued on one stream runs in enqueue order; different streams run
//     concurrently. Enqueueing never blocks on device work.
//   - Record(stream, e) marks the point in `stream` reached by everything
//     enqueued before it; Wait(stream, e) makes later work on `stream` wait
//     until the most recent Record of e (as of the Wait call) is reached;
//     Synchronize(e) blocks the calling thread the same way. An event never
//     recorded counts as reached.
//   - Pointers passed to kernels and copies are device pointers from Alloc,
//     except the host side of CopyToHost/CopyToDevice, which should be pinned
//     (PinHost) for the copy to be asynchronous.
//   - An asynchronous failure (a kernel fault, a bad launch) is sticky: every
//     later Synchronize* returns it.
//
// Thread safety: a Device may be used from several threads; each stream must
// be fed by one thread at a time.
//
// Example (a layer's gradients off the device behind its backward):
//   TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<Device> d, OpenDevice("cuda"));
//   TESSEL_ASSIGN_OR_RETURN(auto grads, DeviceBuffer<float>::Create(d.get(), n));
//   std::unique_ptr<Event> done = d->NewEvent();
//   ... backward enqueued on Stream::kCompute ...
//   d->Record(Stream::kCompute, done.get());
//   d->Wait(Stream::kToHost, done.get());
//   d->CopyToHost(Stream::kToHost, pinned_host, grads.data(), n * sizeof(float));
//   TESSEL_RETURN_IF_ERROR(d->SynchronizeStream(Stream::kToHost));
#ifndef TESSEL_GPU_DEVICE_H_
#define TESSEL_GPU_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/status_macros.h"

namespace tessel::gpu {

// The streams every device has. kCompute runs the model; kToHost carries
// gradients off the device; kToDevice brings parameters back.
enum class Stream { kCompute = 0, kToHost = 1, kToDevice = 2 };
inline constexpr int kNumStreams = 3;

// Created by Device::NewEvent; belongs to that device.
class Event {
 public:
  virtual ~Event() = default;
};

// One contiguous range to gather (Pack) or scatter (Unpack).
struct Segment {
  float* data = nullptr;  // device pointer
  size_t count = 0;       // floats
};

class Device {
 public:
  virtual ~Device() = default;

  // "cuda" or "host".
  virtual absl::string_view kind() const = 0;
  // What it is, for logs: "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, runtime 13.0)".
  virtual std::string description() const = 0;

  // --- memory ------------------------------------------------------------
  // Device memory; ResourceExhausted when there is not enough.
  virtual absl::StatusOr<void*> Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  // Page-locks an existing host range so copies to and from it run
  // asynchronously (cudaHostRegister); UnpinHost undoes it. A no-op on host.
  virtual absl::Status PinHost(void* p, size_t bytes) = 0;
  virtual void UnpinHost(void* p) = 0;

  // --- streams and events ------------------------------------------------
  virtual std::unique_ptr<Event> NewEvent() = 0;
  virtual void Record(Stream s, Event* e) = 0;
  virtual void Wait(Stream s, const Event* e) = 0;
  virtual absl::Status Synchronize(const Event* e) = 0;
  virtual absl::Status SynchronizeStream(Stream s) = 0;
  // Milliseconds from `from` to `to`, both reached (timing of work on the
  // device: the overlap test and the benchmark).
  virtual absl::StatusOr<double> ElapsedMs(const Event* from, const Event* to) = 0;

  // --- copies (bytes) ----------------------------------------------------
  virtual void CopyToHost(Stream s, void* host, const void* device, size_t bytes) = 0;
  virtual void CopyToDevice(Stream s, void* device, const void* host, size_t bytes) = 0;
  virtual void CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(Stream s, float* dst, float value, size_t n) = 0;

  // --- wire kernels --------------------------------------------------------
  // fp32 <-> fp16/bf16 bit patterns, round to nearest even: core/precision.h's
  // FloatToHalf/HalfToFloat bit for bit (NaN stays NaN, overflow to inf).
  virtual void FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) = 0;
  virtual void HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) = 0;
  // Pack: dst = the segments one after another. Unpack: the reverse. One
  // launch for all segments (a bucket of many small tensors).
  virtual void Pack(Stream s, const std::vector<Segment>& segments, float* dst) = 0;
  virtual void Unpack(Stream s, const float* src, const std::vector<Segment>& segments) = 0;

  // --- optimizer -----------------------------------------------------------
  // core/optimizer.h's ApplyUpdate (all five kinds, grad_scale included) on
  // device buffers; `state` holds StateSlots(p) device pointers (the array
  // itself is host memory, read during the call). Scalars are derived on the
  // host exactly as the CPU code derives them. CUDA results equal the CPU's
  // to within a few ulps (docs/gpu.md); host results are the CPU's bit for bit.
  virtual void ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                           const float* grad, float* const* state, size_t n) = 0;

  // --- compression -------------------------------------------------------
  // core/topk.h's TopkCompress on device arrays: residual[0, n) += grad, the
  // k entries of largest magnitude (TopkKey; ties: the lower index) go into
  // `wire` (device memory of SparseBytes(k): rising uint32 indices, then their
  // float32 values) and are zeroed in the residual. Both devices give the CPU
  // function's bits exactly: the selection compares integers and the one
  // addition is IEEE's. n < 2^32; 0 <= k <= n (k = 0 only adds).
  virtual void TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                            uint8_t* wire) = 0;
};

// A device buffer of n elements of T, freed with the device.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(Device* device, size_t n) {
    DeviceBuffer b;
    if (n == 0) return b;
    TESSEL_ASSIGN_OR_RETURN(void* p, device->Alloc(n * sizeof(T)));
    b.device_ = device;
    b.data_ = static_cast<T*>(p);
    b.size_ = n;
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      device_ = o.device_;
      data_ = o.data_;
      size_ = o.size_;
      o.device_ = nullptr;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  T* data() const { return data_; }
  size_t size() const { return size_; }
  void Reset() {
    if (data_ != nullptr) device_->Free(data_);
    device_ = nullptr;
    data_ = nullptr;
    size_ = 0;
  }

 private:
  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

// The CPU emulation (gpu/host_device.h).
std::unique_ptr<Device> NewHostDevice();

// "host", or "cuda" when the binary links //gpu:cuda_device (it registers
// itself); "cuda" without a usable device: FailedPrecondition with the
// reason (no driver, no device, not linked in). Anything else:
// InvalidArgument.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view kind);

// Used by //gpu:cuda_device to make OpenDevice("cuda") reach it.
using DeviceFactory = absl::StatusOr<std::unique_ptr<Device>> (*)();
bool RegisterCudaFactory(DeviceFactory factory);

}  // namespace tessel::gpu

#endif  // TESSEL_GPU_DEVICE_H_
