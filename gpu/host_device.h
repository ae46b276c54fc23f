// The host device (device.h's "host"): the CPU emulation of a compute
// device. Each stream is a thread that runs its queue in order
// (internal/stream_thread.h); "device memory" is 64-byte aligned host memory;
// events are generation counters that stream tasks reach or wait for; the
// kernels are the CPU reference functions, so everything computed on it is
// the CPU path's result bit for bit.
//
// Beyond device.h it runs any CPU work in stream order (Enqueue): how code
// outside the worker's interface, such as the demo model's layers
// (model/host_layers.cc), computes on its streams.
//
// Thread safety: as device.h; Enqueue like any other call on a stream (one
// feeding thread at a time per stream). Tasks run on the stream's thread; a
// task must not wait for work enqueued after it on its own stream.
//
// Example:
//   std::unique_ptr<Device> d = NewHostDevice();
//   HostDevice::From(d.get())->Enqueue(Stream::kCompute, [=] { Relu(v, n); });
//   (void)d->SynchronizeStream(Stream::kCompute);   // it has run
#ifndef TESSEL_GPU_HOST_DEVICE_H_
#define TESSEL_GPU_HOST_DEVICE_H_

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/internal/stream_thread.h"

namespace tessel::gpu {

class HostDevice final : public Device {
 public:
  HostDevice();
  // Runs everything enqueued, then stops the stream threads.
  ~HostDevice() override;

  // `device` as the host device, or null when it is another kind.
  static HostDevice* From(Device* device);

  // Runs `task` on stream s after everything enqueued on s before it.
  void Enqueue(Stream s, std::function<void()> task) {
    streams_[static_cast<int>(s)]->Enqueue(std::move(task));
  }

  absl::string_view kind() const override { return "host"; }
  std::string description() const override;

  absl::StatusOr<void*> Alloc(size_t bytes) override;
  void Free(void* p) override;
  absl::Status PinHost(void*, size_t) override { return absl::OkStatus(); }
  void UnpinHost(void*) override {}

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

  void FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) override;
  void HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) override;
  void Pack(Stream s, const std::vector<Segment>& segments, float* dst) override;
  void Unpack(Stream s, const float* src, const std::vector<Segment>& segments) override;
  void ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                   const float* grad, float* const* state, size_t n) override;
  void TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                    uint8_t* wire) override;

 private:
  std::array<std::unique_ptr<internal::StreamThread>, kNumStreams> streams_;
};

}  // namespace tessel::gpu

#endif  // TESSEL_GPU_HOST_DEVICE_H_
