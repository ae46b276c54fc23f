// The host device (contract: host_device.h).
#include "gpu/host_device.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/topk.h"

namespace tessel::gpu {
namespace {

using Clock = std::chrono::steady_clock;

// An event's state is shared with the stream tasks that reach or wait for
// it, so destroying the Event with work still queued is safe (as with CUDA).
struct EventState {
  // Called by Record on the enqueuing thread: the generation the stream
  // will reach.
  int64_t NextGeneration() {
    std::lock_guard<std::mutex> lock(mu);
    return ++recorded;
  }
  int64_t Recorded() {
    std::lock_guard<std::mutex> lock(mu);
    return recorded;
  }
  void Reach(int64_t generation) {
    std::lock_guard<std::mutex> lock(mu);
    if (generation > reached) {
      reached = generation;
      time = Clock::now();
    }
    cv.notify_all();  // under the lock: a waiter may free the event once it returns
  }
  void AwaitGeneration(int64_t generation) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached >= generation; });
  }
  // The time the latest generation was reached; false if none was recorded
  // or it has not been reached.
  bool Time(Clock::time_point* t) {
    std::lock_guard<std::mutex> lock(mu);
    if (recorded == 0 || reached < recorded) return false;
    *t = time;
    return true;
  }

  std::mutex mu;
  std::condition_variable cv;
  int64_t recorded = 0;
  int64_t reached = 0;
  Clock::time_point time;
};

class HostEvent : public Event {
 public:
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

std::shared_ptr<EventState> StateOf(const Event* e) {
  return static_cast<const HostEvent*>(e)->state;
}

}  // namespace

HostDevice::HostDevice() {
  for (auto& s : streams_) s = std::make_unique<internal::StreamThread>();
}

HostDevice::~HostDevice() {
  for (auto& s : streams_) s.reset();  // each drains its queue first
}

HostDevice* HostDevice::From(Device* device) {
  return device != nullptr && device->kind() == "host" ? static_cast<HostDevice*>(device) : nullptr;
}

std::string HostDevice::description() const {
  return absl::StrCat("host (CPU emulation: ", kNumStreams,
                      " stream threads, the CPU reference kernels)");
}

absl::StatusOr<void*> HostDevice::Alloc(size_t bytes) {
  // More than the machine has can never succeed (and sanitizers abort on it
  // rather than return null).
  const size_t physical =
      static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = rounded < bytes || bytes > physical ? nullptr : std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host device: cannot allocate ", bytes, " bytes"));
  }
  return p;
}

void HostDevice::Free(void* p) { std::free(p); }

std::unique_ptr<Event> HostDevice::NewEvent() { return std::make_unique<HostEvent>(); }

void HostDevice::Record(Stream s, Event* e) {
  std::shared_ptr<EventState> event = StateOf(e);
  const int64_t generation = event->NextGeneration();
  Enqueue(s, [event, generation] { event->Reach(generation); });
}

void HostDevice::Wait(Stream s, const Event* e) {
  std::shared_ptr<EventState> event = StateOf(e);
  const int64_t generation = event->Recorded();
  if (generation == 0) return;
  Enqueue(s, [event, generation] { event->AwaitGeneration(generation); });
}

absl::Status HostDevice::Synchronize(const Event* e) {
  std::shared_ptr<EventState> event = StateOf(e);
  event->AwaitGeneration(event->Recorded());
  return absl::OkStatus();
}

absl::Status HostDevice::SynchronizeStream(Stream s) {
  HostEvent done;
  Record(s, &done);
  return Synchronize(&done);
}

absl::StatusOr<double> HostDevice::ElapsedMs(const Event* from, const Event* to) {
  Clock::time_point a, b;
  if (!StateOf(from)->Time(&a) || !StateOf(to)->Time(&b)) {
    return absl::FailedPreconditionError("ElapsedMs: an event was not recorded or not reached");
  }
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void HostDevice::CopyToHost(Stream s, void* host, const void* device, size_t bytes) {
  Enqueue(s, [=] { std::memcpy(host, device, bytes); });
}
void HostDevice::CopyToDevice(Stream s, void* device, const void* host, size_t bytes) {
  Enqueue(s, [=] { std::memcpy(device, host, bytes); });
}
void HostDevice::CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) {
  Enqueue(s, [=] { std::memmove(dst, src, bytes); });
}
void HostDevice::Fill(Stream s, float* dst, float value, size_t n) {
  Enqueue(s, [=] { std::fill(dst, dst + n, value); });
}

void HostDevice::FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) {
  Enqueue(s, [=] { tessel::FloatToHalf(t, in, out, n); });
}
void HostDevice::HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) {
  Enqueue(s, [=] { tessel::HalfToFloat(t, in, out, n); });
}
void HostDevice::Pack(Stream s, const std::vector<Segment>& segments, float* dst) {
  Enqueue(s, [segments, dst] {
    float* out = dst;
    for (const Segment& g : segments) {
      std::memcpy(out, g.data, g.count * sizeof(float));
      out += g.count;
    }
  });
}
void HostDevice::Unpack(Stream s, const float* src, const std::vector<Segment>& segments) {
  Enqueue(s, [segments, src] {
    const float* in = src;
    for (const Segment& g : segments) {
      std::memcpy(g.data, in, g.count * sizeof(float));
      in += g.count;
    }
  });
}

void HostDevice::ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                             const float* grad, float* const* state, size_t n) {
  std::array<float*, kMaxStateSlots> slots{};
  for (int k = 0; k < StateSlots(p); ++k) slots[k] = state[k];
  Enqueue(s, [=] { tessel::ApplyUpdate(p, step, params, grad, slots.data(), n); });
}

void HostDevice::TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                              uint8_t* wire) {
  Enqueue(s, [=] { tessel::TopkCompress(grad, residual, n, k, wire); });
}

std::unique_ptr<Device> NewHostDevice() { return std::make_unique<HostDevice>(); }

}  // namespace tessel::gpu
