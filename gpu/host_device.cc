// The CPU emulation of a device (device.h): one thread per stream, host
// memory, the CPU reference kernels.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/topk.h"
#include "gpu/device.h"
#include "model/layer_kernels.h"

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

// One in-order queue served by its own thread.
class StreamThread {
 public:
  StreamThread() : thread_([this] { Run(); }) {}
  ~StreamThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // Scratch for the kernels that need it; touched only by this stream's
  // thread.
  std::vector<float>* scratch() { return &scratch_; }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_, and everything done
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<float> scratch_;
  std::thread thread_;  // last: starts once the members above exist
};

class HostDevice : public Device {
 public:
  HostDevice() {
    for (auto& s : streams_) s = std::make_unique<StreamThread>();
  }
  ~HostDevice() override {
    for (auto& s : streams_) s.reset();  // each drains its queue first
  }

  absl::string_view kind() const override { return "host"; }
  std::string description() const override {
    return absl::StrCat("host (CPU emulation: ", kNumStreams,
                        " stream threads, the CPU reference kernels)");
  }

  absl::StatusOr<void*> Alloc(size_t bytes) override {
    // More than the machine has can never succeed (and sanitizers abort on
    // it rather than return null).
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
  void Free(void* p) override { std::free(p); }
  absl::Status PinHost(void*, size_t) override { return absl::OkStatus(); }
  void UnpinHost(void*) override {}

  std::unique_ptr<Event> NewEvent() override { return std::make_unique<HostEvent>(); }
  void Record(Stream s, Event* e) override {
    std::shared_ptr<EventState> event = StateOf(e);
    const int64_t generation = event->NextGeneration();
    On(s, [event, generation] { event->Reach(generation); });
  }
  void Wait(Stream s, const Event* e) override {
    std::shared_ptr<EventState> event = StateOf(e);
    const int64_t generation = event->Recorded();
    if (generation == 0) return;
    On(s, [event, generation] { event->AwaitGeneration(generation); });
  }
  absl::Status Synchronize(const Event* e) override {
    std::shared_ptr<EventState> event = StateOf(e);
    event->AwaitGeneration(event->Recorded());
    return absl::OkStatus();
  }
  absl::Status SynchronizeStream(Stream s) override {
    HostEvent done;
    Record(s, &done);
    return Synchronize(&done);
  }
  absl::StatusOr<double> ElapsedMs(const Event* from, const Event* to) override {
    Clock::time_point a, b;
    if (!StateOf(from)->Time(&a) || !StateOf(to)->Time(&b)) {
      return absl::FailedPreconditionError("ElapsedMs: an event was not recorded or not reached");
    }
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  void CopyToHost(Stream s, void* host, const void* device, size_t bytes) override {
    On(s, [=] { std::memcpy(host, device, bytes); });
  }
  void CopyToDevice(Stream s, void* device, const void* host, size_t bytes) override {
    On(s, [=] { std::memcpy(device, host, bytes); });
  }
  void CopyOnDevice(Stream s, void* dst, const void* src, size_t bytes) override {
    On(s, [=] { std::memmove(dst, src, bytes); });
  }
  void Fill(Stream s, float* dst, float value, size_t n) override {
    On(s, [=] { std::fill(dst, dst + n, value); });
  }

  void FloatToHalf(Stream s, HalfType t, const float* in, uint16_t* out, size_t n) override {
    On(s, [=] { tessel::FloatToHalf(t, in, out, n); });
  }
  void HalfToFloat(Stream s, HalfType t, const uint16_t* in, float* out, size_t n) override {
    On(s, [=] { tessel::HalfToFloat(t, in, out, n); });
  }
  void Pack(Stream s, const std::vector<Segment>& segments, float* dst) override {
    On(s, [segments, dst] {
      float* out = dst;
      for (const Segment& g : segments) {
        std::memcpy(out, g.data, g.count * sizeof(float));
        out += g.count;
      }
    });
  }
  void Unpack(Stream s, const float* src, const std::vector<Segment>& segments) override {
    On(s, [segments, src] {
      const float* in = src;
      for (const Segment& g : segments) {
        std::memcpy(g.data, in, g.count * sizeof(float));
        in += g.count;
      }
    });
  }

  void ApplyUpdate(Stream s, const OptimizerParams& p, int64_t step, float* params,
                   const float* grad, float* const* state, size_t n) override {
    std::array<float*, kMaxStateSlots> slots{};
    for (int k = 0; k < StateSlots(p); ++k) slots[k] = state[k];
    On(s, [=] { tessel::ApplyUpdate(p, step, params, grad, slots.data(), n); });
  }

  void TopkCompress(Stream s, const float* grad, float* residual, int64_t n, int64_t k,
                    uint8_t* wire) override {
    On(s, [=] { tessel::TopkCompress(grad, residual, n, k, wire); });
  }

  void Linear(Stream s, int batch, int in, int out, const float* input, const float* weight,
              const float* bias, float* output) override {
    StreamThread* t = stream(s);
    On(s,
       [=] { model::kernels::Linear(batch, in, out, input, weight, bias, output, t->scratch()); });
  }
  void Relu(Stream s, float* v, size_t n) override {
    On(s, [=] { model::kernels::Relu(v, n); });
  }
  void SoftmaxCrossEntropy(Stream s, const float* logits, const int32_t* y, int batch, int classes,
                           float* loss, float* dlogits) override {
    On(s, [=] { *loss = model::kernels::SoftmaxCrossEntropy(logits, y, batch, classes, dlogits); });
  }
  void BiasGrad(Stream s, int batch, int out, const float* d_output, float* d_bias) override {
    On(s, [=] { model::kernels::BiasGrad(batch, out, d_output, d_bias); });
  }
  void WeightGrad(Stream s, int batch, int in, int out, const float* d_output, const float* input,
                  float* d_weight) override {
    StreamThread* t = stream(s);
    On(s, [=] {
      model::kernels::WeightGrad(batch, in, out, d_output, input, d_weight, t->scratch());
    });
  }
  void InputGrad(Stream s, int batch, int in, int out, const float* d_output, const float* weight,
                 float* d_input) override {
    On(s, [=] { model::kernels::InputGrad(batch, in, out, d_output, weight, d_input); });
  }
  void ReluMask(Stream s, const float* activation, float* d, size_t n) override {
    On(s, [=] { model::kernels::ReluMask(activation, d, n); });
  }

 private:
  StreamThread* stream(Stream s) { return streams_[static_cast<int>(s)].get(); }
  void On(Stream s, std::function<void()> task) { stream(s)->Enqueue(std::move(task)); }

  std::array<std::unique_ptr<StreamThread>, kNumStreams> streams_;
};

}  // namespace

std::unique_ptr<Device> NewHostDevice() { return std::make_unique<HostDevice>(); }

}  // namespace tessel::gpu
